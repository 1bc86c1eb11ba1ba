//! Every `wasm-ipam …` command line the README and docs/ show names a command and
//! flags this binary has: a renamed or removed flag fails here, not in a reader's
//! terminal. Read are the lines of code blocks (fenced, or indented four spaces) that
//! start with `wasm-ipam ` and the inline code spans that do; a placeholder
//! (`COMMAND`, `MODULE`) is taken as written, and only the command and its `--flags`
//! are checked, not the values.

#[cfg(test)]
mod tests {
    use crate::operator::cli::Cli;
    use clap::CommandFactory;
    use std::path::PathBuf;

    fn documents() -> Vec<PathBuf> {
        let root = crate::test_support::workspace_root();
        let mut paths = vec![root.join("README.md"), root.join("SECURITY.md")];
        let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        docs.sort();
        paths.extend(docs);
        paths
    }

    /// The command lines of a Markdown text, each with its line number.
    fn command_lines(text: &str) -> Vec<(usize, String)> {
        let mut found = Vec::new();
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let in_block = fenced || line.starts_with("    ");
            let shell = trimmed
                .trim_start_matches("$ ")
                .trim_start_matches("sudo ")
                .trim_start_matches("./");
            if in_block && shell.starts_with("wasm-ipam ") {
                found.push((n + 1, shell.to_string()));
            }
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 && span.starts_with("wasm-ipam ") {
                    found.push((n + 1, span.to_string()));
                }
            }
        }
        found
    }

    /// What one line asks: its command words, then its flags; or why it cannot be.
    fn check(line: &str) -> Result<(), String> {
        let end = [" | ", " && ", " || ", "; ", " #", " >", " 2>"]
            .iter()
            .filter_map(|cut| line.find(cut))
            .min()
            .unwrap_or(line.len());
        let words: Vec<&str> = line[..end].split_whitespace().skip(1).collect();
        let mut command = Cli::command();
        let mut rest = words.as_slice();
        while let Some((word, after)) = rest.split_first() {
            let word = word.trim_start_matches('[');
            if word.starts_with('-') {
                break;
            }
            if word.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return Ok(()); // `wasm-ipam COMMAND --help`: a placeholder
            }
            match command.find_subcommand(word) {
                Some(sub) => command = sub.clone(),
                None if command.has_subcommands() => {
                    return Err(format!("no command {word:?}"));
                }
                None => break,
            }
            rest = after;
        }
        if command.has_subcommands() && command.get_name() == "wasm-ipam" {
            // `wasm-ipam --version` and `--help` need none.
            return match words[..] {
                ["--version" | "--help"] => Ok(()),
                _ => Err("no command".into()),
            };
        }
        for word in words {
            let Some(flag) = word.trim_start_matches('[').strip_prefix("--") else {
                continue;
            };
            let flag = flag
                .split(['=', ']', ',', ')', '`', '|'])
                .next()
                .unwrap_or_default();
            if flag.is_empty() || flag == "help" || flag == "version" {
                continue;
            }
            if !command.get_arguments().any(|a| a.get_long() == Some(flag)) {
                return Err(format!(
                    "`wasm-ipam {}` has no --{flag}",
                    command.get_name()
                ));
            }
        }
        Ok(())
    }

    #[test]
    fn every_command_line_in_the_docs_parses() {
        let mut checked = 0;
        let mut wrong = Vec::new();
        for path in documents() {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in command_lines(&text) {
                checked += 1;
                if let Err(why) = check(&line) {
                    wrong.push(format!("{}:{n}: {line}\n  {why}", path.display()));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(checked > 50, "only {checked} command lines found");
    }

    #[test]
    fn an_unknown_command_or_flag_is_caught() {
        assert_eq!(check("wasm-ipam list --json --network n"), Ok(()));
        assert_eq!(check("wasm-ipam store backup --to f"), Ok(()));
        assert_eq!(check("wasm-ipam COMMAND --help"), Ok(()));
        assert_eq!(check("wasm-ipam --version"), Ok(()));
        assert!(check("wasm-ipam --verbose").is_err());
        assert_eq!(
            check("wasm-ipam list [--network NAME] [--json] | head"),
            Ok(())
        );
        assert!(check("wasm-ipam lsit").is_err());
        assert!(check("wasm-ipam list --jsn").is_err());
        assert!(check("wasm-ipam store chek").is_err());
        assert!(check("wasm-ipam inspect m.wasm --data-dir d").is_err());
    }
}
