//! A document's code blocks, read one way for every test that runs a document as
//! written (docs/writing-a-module.md, docs/supply-chain.md, docs/cluster.md), so the
//! documents share one set of conventions, the blocks' info strings:
//!
//! - ```` ```sh ```` — commands, run as a reader would;
//! - ```` ```output ```` right after a `sh` block — all that block prints on stdout,
//!   line by line (runs of whitespace collapsed, blank lines ignored);
//! - ```` ```output excerpt ```` — whole lines of it, in this order;
//! - ```` ```output fragments ```` — pieces of it, each found somewhere in what it
//!   prints (whitespace collapsed), for lines that hold a run's digests or paths;
//! - ```` ```<lang> file=PATH ```` / ```` ```<lang> generated=PATH ```` — a file the
//!   reader writes, or one an earlier command wrote (the tutorial);
//! - `<!-- part: NAME -->` — starts a part of a document (the tutorial's languages).
//!
//! Only fences at the start of a line count: a block indented inside a list item is
//! an illustration, never run.

/// A fenced block: its info string and its text (each line ending in a newline).
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub info: String,
    pub text: String,
}

impl Block {
    /// The value of `name` in the info string (`file=` → the path).
    pub fn attribute(&self, name: &str) -> Option<String> {
        self.info
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name).map(str::to_string))
    }
}

/// A document's blocks and part markers, in order.
#[derive(Debug, PartialEq)]
pub enum Piece {
    Part(String),
    Block(Block),
}

pub fn pieces(doc: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut open: Option<Block> = None;
    for line in doc.lines() {
        let fence = line.strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => pieces.push(Piece::Block(open.take().unwrap())),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {
                if let Some(name) = line
                    .strip_prefix("<!-- part: ")
                    .and_then(|l| l.strip_suffix(" -->"))
                {
                    pieces.push(Piece::Part(name.to_string()));
                }
            }
        }
    }
    pieces
}

/// A document's blocks, in order.
pub fn blocks(doc: &str) -> Vec<Block> {
    pieces(doc)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Block(block) => Some(block),
            Piece::Part(_) => None,
        })
        .collect()
}

/// What a `sh` block must print: nothing checked, all of it, whole lines of it in
/// order, or pieces of it.
#[derive(Debug, PartialEq, Default, Clone)]
pub enum Expect {
    #[default]
    Anything,
    Exactly(Vec<String>),
    Excerpt(Vec<String>),
    Fragments(Vec<String>),
}

impl Expect {
    /// What an output block says, or `None` for a block of another kind.
    pub fn of(block: &Block) -> Option<Expect> {
        let lines = || -> Vec<String> {
            block
                .text
                .lines()
                .map(collapse)
                .filter(|l| !l.is_empty())
                .collect()
        };
        match block.info.as_str() {
            "output" => Some(Expect::Exactly(lines())),
            "output excerpt" => Some(Expect::Excerpt(lines())),
            "output fragments" => Some(Expect::Fragments(lines())),
            _ => None,
        }
    }
}

/// The `sh` blocks of `blocks`, each with what the output block right after it says.
pub fn runs(blocks: &[Block]) -> Vec<(String, Expect)> {
    let mut runs: Vec<(String, Expect)> = Vec::new();
    let mut last_was_sh = false;
    for block in blocks {
        if block.info == "sh" {
            runs.push((block.text.clone(), Expect::Anything));
            last_was_sh = true;
            continue;
        }
        if let Some(expect) = Expect::of(block) {
            assert!(
                last_was_sh,
                "an output block must follow a sh block, once:\n{}",
                block.text
            );
            runs.last_mut().unwrap().1 = expect;
        }
        last_was_sh = false;
    }
    runs
}

/// Whether `printed` is what `expect` says, or how it differs.
pub fn check(printed: &str, expect: &Expect) -> Result<(), String> {
    let printed: Vec<String> = printed
        .lines()
        .map(collapse)
        .filter(|l| !l.is_empty())
        .collect();
    match expect {
        Expect::Anything => Ok(()),
        Expect::Exactly(lines) if *lines == printed => Ok(()),
        Expect::Exactly(lines) => Err(format!(
            "printed, whitespace collapsed:\n{}\nthe document says:\n{}",
            printed.join("\n"),
            lines.join("\n")
        )),
        Expect::Excerpt(lines) => {
            let mut rest = printed.iter();
            match lines.iter().find(|line| !rest.any(|p| p == *line)) {
                None => Ok(()),
                Some(line) => Err(format!(
                    "did not print {line:?} as a whole line (after the lines before it); printed:\n{}",
                    printed.join("\n")
                )),
            }
        }
        Expect::Fragments(pieces) => {
            let all = printed.join(" ");
            match pieces.iter().find(|piece| !all.contains(piece.as_str())) {
                None => Ok(()),
                Some(piece) => Err(format!(
                    "did not print {piece:?}; printed:\n{}",
                    printed.join("\n")
                )),
            }
        }
    }
}

/// `line` with its runs of whitespace as one space, trimmed.
pub fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn outputs_are_compared_whole_as_ordered_excerpts_or_as_fragments() {
    let printed = "a  b\n\nc\nd\n";
    let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let exactly = |l: &[&str]| Expect::Exactly(lines(l));
    let excerpt = |l: &[&str]| Expect::Excerpt(lines(l));
    let fragments = |l: &[&str]| Expect::Fragments(lines(l));
    assert_eq!(check(printed, &exactly(&["a b", "c", "d"])), Ok(()));
    assert!(
        check(printed, &exactly(&["a b", "c"])).is_err(),
        "a line more"
    );
    assert!(
        check(printed, &exactly(&["a b", "d", "c"])).is_err(),
        "order"
    );
    assert_eq!(check(printed, &excerpt(&["a b", "d"])), Ok(()));
    assert!(check(printed, &excerpt(&["d", "a b"])).is_err(), "order");
    assert!(
        check(printed, &excerpt(&["a"])).is_err(),
        "a part of a line"
    );
    assert_eq!(check(printed, &fragments(&["d", "b c", "a"])), Ok(()));
    assert!(check(printed, &fragments(&["e"])).is_err(), "not printed");
}

#[test]
fn blocks_and_parts_are_read_in_order_and_indented_fences_are_not_blocks() {
    let doc = "<!-- part: one -->\n```sh\nls\n```\n\n```output excerpt\na   b\n```\n  ```sh\n  rm -rf /\n  ```\n```rust file=src/lib.rs\nfn f() {}\n```\n";
    let block = |info: &str, text: &str| {
        Piece::Block(Block {
            info: info.into(),
            text: text.into(),
        })
    };
    assert_eq!(
        pieces(doc),
        [
            Piece::Part("one".into()),
            block("sh", "ls\n"),
            block("output excerpt", "a   b\n"),
            block("rust file=src/lib.rs", "fn f() {}\n"),
        ]
    );
    let blocks = blocks(doc);
    assert_eq!(blocks[2].attribute("file=").as_deref(), Some("src/lib.rs"));
    assert_eq!(
        runs(&blocks),
        [("ls\n".to_string(), Expect::Excerpt(vec!["a b".into()]))]
    );
}
