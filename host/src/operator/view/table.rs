//! The tables operator commands print for people (`list`, `stats`, `gc`): each column
//! as wide as its widest cell, so a long name or a 39-digit IPv6 count never pushes
//! the columns after it out of line, as kubectl's and crictl's tables do.

/// How a column's cells line up: names left, counts right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table built row by row, laid out once every cell is known.
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            columns: columns
                .iter()
                .map(|(name, align)| (name.to_string(), *align))
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra ones are a bug.
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert!(cells.len() <= self.columns.len(), "{cells:?}");
        self.rows.push(cells);
    }

    /// The header and the rows, a space between columns, no trailing spaces.
    pub fn render(&self) -> String {
        let width = |i: usize| {
            let cells = self.rows.iter().filter_map(|r| r.get(i));
            cells
                .map(|c| c.chars().count())
                .chain([self.columns[i].0.chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.columns.len()).map(width).collect();
        let header: Vec<String> = self.columns.iter().map(|(name, _)| name.clone()).collect();
        let mut out = String::new();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (_, align)) in self.columns.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                if i > 0 {
                    line.push(' ');
                }
                let pad = widths[i].saturating_sub(cell.chars().count());
                match align {
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_as_wide_as_its_widest_cell_whatever_the_width() {
        let mut t = Table::new(&[("NAME", Align::Left), ("COUNT", Align::Right)]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec![
            "pool default fd00::/48".into(),
            "1208925819614629174706176".into(),
        ]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME                                       COUNT",
                "a                                              1",
                "pool default fd00::/48 1208925819614629174706176",
            ]
        );
        // The right-aligned column ends where the header's does, on every line.
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
    }

    #[test]
    fn a_short_row_leaves_its_last_cells_empty_without_trailing_spaces() {
        let mut t = Table::new(&[("A", Align::Left), ("B", Align::Left)]);
        t.row(vec!["x".into()]);
        assert_eq!(t.render(), "A B\nx\n");
    }
}
