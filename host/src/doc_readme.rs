//! The README is the front door: what wasm-ipam is and why, the two set-up commands,
//! a short example, the figures and where to read on. Reference tables live in docs/
//! (configuration, error codes) and SECURITY.md (limits), each held true by its own
//! test; this one keeps the README short and its links pointing at files that exist.

#[cfg(test)]
mod tests {
    use crate::test_support::{workspace_file, workspace_root};

    /// Under 150 lines, with the two commands a fresh machine needs.
    #[test]
    fn the_readme_is_short_and_gives_the_two_set_up_commands() {
        let readme = workspace_file("README.md");
        let lines = readme.lines().count();
        assert!(
            lines < 150,
            "README.md has {lines} lines: move reference to docs/"
        );
        for command in ["    ./scripts/demo.sh\n", "    ./scripts/test.sh\n"] {
            assert!(readme.contains(command), "README.md lacks {command:?}");
        }
    }

    /// Every relative link of the README names a file of the repository.
    #[test]
    fn the_readmes_links_resolve() {
        let root = workspace_root();
        let readme = workspace_file("README.md");
        let mut checked = 0;
        for (i, _) in readme.match_indices("](") {
            let target = &readme[i + 2..];
            let target = &target[..target.find(')').expect("a closed link")];
            if target.contains("://") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            assert!(
                root.join(file).exists(),
                "README.md links to {target}, which is not there"
            );
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} links found");
    }
}
