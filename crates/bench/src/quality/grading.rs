//! Reading a reply's answer and checking it: the last `Answer:` line after any reasoning block;
//! numbers compared as numbers (thousands separators, a unicode minus, a unit after them), dates
//! in ISO form, strings exactly but for case and surrounding quotes. A reply that hedges — two
//! numbers, two dates, another unit — does not pass.

use super::calendar::Date;
use super::items::{Check, Unit};

/// The text after a reasoning block the template left in the content.
pub fn without_thinking(text: &str) -> &str {
    match text.rfind("</think>") {
        Some(end) => &text[end + "</think>".len()..],
        None => text,
    }
}

/// The last `Answer:` line's value (markup stripped), else the last non-empty line.
pub fn answer_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let marked = lines.iter().rev().find_map(|line| {
        let plain = line.replace(['*', '`', '#'], "");
        let lower = plain.to_lowercase();
        lower
            .rfind("answer:")
            .map(|at| plain[at + "answer:".len()..].trim().to_owned())
    });
    marked
        .or_else(|| lines.last().map(|l| l.to_string()))
        .filter(|a| !a.is_empty())
}

/// Whether `got` (an answer line) is the expected answer.
pub fn matches(check: &Check, expected: &str, got: &str) -> bool {
    match check {
        Check::Number { unit, tolerance } => {
            let Some(want) = numbers(expected).first().map(|n| n.value) else {
                return false;
            };
            match numbers(got).as_slice() {
                [only] => {
                    (only.value - want).abs() <= *tolerance && unit_follows(&got[only.end..], *unit)
                }
                _ => false,
            }
        }
        Check::Date => {
            let dates = iso_dates(got);
            dates.len() == 1 && Date::parse_iso(expected) == Some(dates[0])
        }
        Check::Exact => bare(got).eq_ignore_ascii_case(bare(expected)),
    }
}

/// Without surrounding quotes, markup, spaces and punctuation.
fn bare(text: &str) -> &str {
    text.trim_matches(|c: char| !c.is_alphanumeric())
}

/// What follows the number is nothing, or the unit in one of its spellings.
fn unit_follows(rest: &str, unit: Option<&Unit>) -> bool {
    let rest = rest
        .trim()
        .trim_end_matches(['.', ',', ';', ')', '*', '`'])
        .trim()
        .to_lowercase();
    rest.is_empty() || unit.is_some_and(|u| u.names.contains(&rest.as_str()))
}

/// A number found in a text, and where it ends.
#[derive(Debug, PartialEq)]
struct Found {
    value: f64,
    end: usize,
}

/// Every number in `text`: an optional sign (`-` or `−`), digits grouped by commas, thin or
/// no-break spaces in threes, and decimals after a point.
fn numbers(text: &str) -> Vec<Found> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].1.is_ascii_digit() || (i > 0 && chars[i - 1].1.is_alphanumeric()) {
            i += 1;
            continue;
        }
        let negative = i > 0 && matches!(chars[i - 1].1, '-' | '−');
        let mut digits = String::new();
        while i < chars.len() {
            let c = chars[i].1;
            if c.is_ascii_digit() {
                digits.push(c);
                i += 1;
            } else if matches!(c, ',' | '\u{202f}' | '\u{a0}' | '_') && grouped(&chars, i + 1) {
                i += 1;
            } else if c == '.' && chars.get(i + 1).is_some_and(|n| n.1.is_ascii_digit()) {
                digits.push('.');
                i += 1;
            } else {
                break;
            }
        }
        if let Ok(value) = digits.parse::<f64>() {
            let end = chars.get(i).map_or(text.len(), |c| c.0);
            found.push(Found {
                value: if negative { -value } else { value },
                end,
            });
        }
    }
    found
}

/// Exactly three digits start at `at` (a thousands group).
fn grouped(chars: &[(usize, char)], at: usize) -> bool {
    let digits = chars[at.min(chars.len())..]
        .iter()
        .take_while(|c| c.1.is_ascii_digit())
        .count();
    digits == 3
}

/// Every date written YYYY-MM-DD in `text`, distinct.
fn iso_dates(text: &str) -> Vec<Date> {
    let mut dates: Vec<Date> = text
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter_map(|word| Date::parse_iso(word.trim_matches('-')))
        .collect();
    dates.dedup();
    dates
}

#[cfg(test)]
mod tests {
    use super::*;

    const KM: Unit = Unit {
        symbol: "km",
        names: &["km", "kilometres", "kilometers"],
    };
    const WHOLE: Check = Check::Number {
        unit: None,
        tolerance: 1e-9,
    };
    const DISTANCE: Check = Check::Number {
        unit: Some(&KM),
        tolerance: 0.005 + 1e-9,
    };

    #[test]
    fn whole_numbers_pass_in_any_common_writing_and_hedges_fail() {
        let pass = |got: &str| matches(&WHOLE, "10063", got);
        assert!(pass("10063"));
        assert!(pass("10,063"));
        assert!(pass("10\u{202f}063."));
        assert!(pass("**10063**"));
        assert!(pass("10063.0"));
        assert!(pass("x = 10063"));
        assert!(!pass("10036"));
        assert!(!pass("10063 or 10064"));
        assert!(!pass("1006"));
        assert!(
            !pass("100,63"),
            "a comma not before three digits ends the number"
        );
        assert!(!pass("10063 km"), "no unit was asked for");
        assert!(matches(&WHOLE, "-42", "−42"));
        assert!(matches(&WHOLE, "-42", "-42"));
        assert!(!matches(&WHOLE, "-42", "42"));
        assert!(
            !matches(&WHOLE, "42", "x42"),
            "digits inside a word are no number"
        );
    }

    #[test]
    fn numbers_with_units_pass_only_with_that_unit_and_within_rounding() {
        let pass = |got: &str| matches(&DISTANCE, "42.16 km", got);
        assert!(pass("42.16 km"));
        assert!(pass("42.16"));
        assert!(pass("42.16 kilometres."));
        assert!(pass("42.1648 km"), "the unrounded figure passes");
        assert!(pass("42.160 KM"));
        assert!(!pass("42.17 km"));
        assert!(!pass("42.16 miles"));
        assert!(!pass("42160 m"));
        assert!(!pass("about 42 km"));
        assert!(!pass("42.16 km (26.2 miles)"));
    }

    #[test]
    fn dates_pass_in_iso_form_only() {
        let pass = |got: &str| matches(&Check::Date, "2024-02-29", got);
        assert!(pass("2024-02-29"));
        assert!(pass("**2024-02-29**."));
        assert!(pass("It is 2024-02-29"));
        assert!(!pass("2024-03-01"));
        assert!(!pass("29 February 2024"));
        assert!(!pass("02/29/2024"));
        assert!(!pass("2024-02-29 or 2024-03-01"));
        assert!(!pass("2023-02-29"), "no such date");
    }

    #[test]
    fn strings_pass_exactly_but_for_case_and_quotes() {
        let pass = |got: &str| matches(&Check::Exact, "kramhcneb", got);
        assert!(pass("kramhcneb"));
        assert!(pass("`kramhcneb`"));
        assert!(pass("\"Kramhcneb\"."));
        assert!(!pass("kramhcne"));
        assert!(!pass("kramhcneb kramhcneb"));
        assert!(!pass("the word is kramhcneb"));
        assert!(matches(&Check::Exact, "Friday", "friday"));
        assert!(!matches(&Check::Exact, "no", "yes, or no"));
    }

    #[test]
    fn the_answer_is_the_last_answer_line_after_any_reasoning() {
        let read = |text: &str| answer_line(without_thinking(text));
        assert_eq!(
            read("347 × 29 = 10,063.\nAnswer: 10,063").as_deref(),
            Some("10,063")
        );
        assert_eq!(read("**Answer:** 10063").as_deref(), Some("10063"));
        assert_eq!(
            read("<think>Answer: Canberra</think>Answer: Sydney").as_deref(),
            Some("Sydney")
        );
        assert_eq!(read("Answer: 3\nWait.\nAnswer: 4").as_deref(), Some("4"));
        assert_eq!(read("just 8").as_deref(), Some("just 8"));
        assert_eq!(read("Answer:").as_deref(), None);
        assert_eq!(read("").as_deref(), None);
    }
}
