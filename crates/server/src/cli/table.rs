//! Plain-text tables for the command line: left-aligned columns as wide as their widest cell, two
//! spaces apart, no trailing blanks.

/// The header line and one line per row, each ending in a newline.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out += &line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell_and_lines_carry_no_trailing_blanks() {
        let rows = vec![
            vec!["0".to_owned(), "RTX 3090 Ti".to_owned(), "".to_owned()],
            vec!["12".to_owned(), "A".to_owned(), "x".to_owned()],
        ];
        assert_eq!(
            render(&["#", "NAME", "NOTE"], &rows),
            "#   NAME         NOTE\n0   RTX 3090 Ti\n12  A            x\n"
        );
    }
}
