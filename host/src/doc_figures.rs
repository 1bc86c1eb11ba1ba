//! The figures the README quotes are BENCHMARKS.md's: every measured figure in its
//! "Figures" section (a number with `ms`, `s`, `MiB` or `×`, or "N of M") is found, as
//! written, in BENCHMARKS.md, which `./bench/run.sh` rewrites. A run that changes a
//! figure fails here until the README says the same; no other doc quotes them.

#[cfg(test)]
mod tests {
    use crate::test_support::workspace_file;

    /// The text of `markdown`'s section `heading` (to the next `## `).
    fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
        let start = markdown
            .find(&format!("\n## {heading}\n"))
            .unwrap_or_else(|| panic!("no section {heading:?}"));
        let body = &markdown[start + heading.len() + 5..];
        body.find("\n## ").map_or(body, |end| &body[..end])
    }

    /// The figures of `text` as written: "4.76 ms", "0.92×", "4.7 MiB", "2 s",
    /// "480 of 500", with any line break inside one read as a space.
    fn figures(text: &str) -> Vec<String> {
        const AROUND: [char; 7] = ['(', ')', '*', ',', '.', ';', ':'];
        let words: Vec<&str> = text
            .split_whitespace()
            .map(|w| w.trim_matches(AROUND))
            .collect();
        let number = |w: &str| {
            w.starts_with(|c: char| c.is_ascii_digit())
                && w.chars().all(|c| c.is_ascii_digit() || c == '.')
        };
        let mut found = Vec::new();
        for (i, &word) in words.iter().enumerate() {
            if let Some(ratio) = word.strip_suffix('×')
                && number(ratio)
            {
                found.push(word.to_string());
                continue;
            }
            if !number(word) {
                continue;
            }
            match words.get(i + 1).copied() {
                Some(unit @ ("ms" | "s" | "MiB")) => found.push(format!("{word} {unit}")),
                Some("of") => {
                    if let Some(&total) = words.get(i + 2)
                        && number(total)
                    {
                        found.push(format!("{word} of {total}"));
                    }
                }
                _ => {}
            }
        }
        found
    }

    #[test]
    fn the_figures_are_read_as_written() {
        assert_eq!(
            figures(
                "takes 4.76 ms, 0.92× host-local's (target 0.7×, missed) is 4.7 MiB;\nfails 480 of\n500 DELs with a 2 s budget, 1.23× the"
            ),
            [
                "4.76 ms",
                "0.92×",
                "0.7×",
                "4.7 MiB",
                "480 of 500",
                "2 s",
                "1.23×"
            ]
        );
        assert_eq!(figures("version 0.2.5, 100 pods"), Vec::<String>::new());
    }

    #[test]
    fn the_readmes_figures_are_benchmarks_mds() {
        let readme = workspace_file("README.md");
        let quoted = figures(section(&readme, "Figures"));
        assert!(quoted.len() >= 10, "found only {quoted:?}");
        let measured = workspace_file("BENCHMARKS.md").replace("**", "");
        let measured = measured.split_whitespace().collect::<Vec<_>>().join(" ");
        let missing: Vec<&String> = quoted
            .iter()
            .filter(|f| !measured.contains(f.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "README.md's Figures quote {missing:?}, which BENCHMARKS.md does not say: copy its figures as written"
        );
    }
}
