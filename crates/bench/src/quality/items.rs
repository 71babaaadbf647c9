//! The probe's questions, made by seeded generators rather than taken from a fixed list, so a
//! model cannot have seen them: arithmetic, unit conversions, date reasoning, string
//! manipulation and code tracing, in turn. Each item's answer is computed by its generator. Item
//! `i` of a seed depends on the seed and `i` alone, so a longer probe of the same seed asks the
//! shorter one's questions first and two probes of one seed can be compared question by question.

use super::calendar::Date;

/// The categories, in the order items take them.
pub const CATEGORIES: [&str; 5] = ["arithmetic", "units", "dates", "strings", "code"];

/// How a reply's answer is compared with the expected one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Check {
    /// One number equal to the answer within `tolerance`, followed by nothing or by `unit`.
    Number {
        unit: Option<&'static Unit>,
        tolerance: f64,
    },
    /// One date in ISO form (YYYY-MM-DD), the expected one.
    Date,
    /// The expected string, ignoring case and surrounding quotes or punctuation.
    Exact,
}

/// A unit as answers may write it.
#[derive(Debug, PartialEq)]
pub struct Unit {
    pub symbol: &'static str,
    /// Every spelling accepted after the number, lower case.
    pub names: &'static [&'static str],
}

/// One generated question.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// `category-n`: the n-th question of its category (from 1).
    pub id: String,
    pub category: &'static str,
    pub prompt: String,
    pub answer: String,
    pub check: Check,
}

/// The first `count` items of `seed`.
pub fn items(seed: u64, count: u32) -> Vec<Item> {
    (0..count).map(|index| item(seed, index)).collect()
}

/// Item `index` of `seed`.
pub fn item(seed: u64, index: u32) -> Item {
    let mut rng = SplitMix64(seed ^ u64::from(index).wrapping_mul(0xD1B5_4A32_D192_ED03));
    rng.next();
    let category = (index as usize) % CATEGORIES.len();
    let made = match category {
        0 => arithmetic(&mut rng),
        1 => conversion(&mut rng),
        2 => date_question(&mut rng),
        3 => string_question(&mut rng),
        _ => code_trace(&mut rng),
    };
    Item {
        id: format!(
            "{}-{}",
            CATEGORIES[category],
            index as usize / CATEGORIES.len() + 1
        ),
        category: CATEGORIES[category],
        prompt: made.prompt,
        answer: made.answer,
        check: made.check,
    }
}

/// A question and its answer, before it gets its id.
struct Made {
    prompt: String,
    answer: String,
    check: Check,
}

const WHOLE: Check = Check::Number {
    unit: None,
    tolerance: 1e-9,
};

fn whole(prompt: String, answer: i64) -> Made {
    Made {
        prompt,
        answer: answer.to_string(),
        check: WHOLE,
    }
}

/// SplitMix64: a small generator whose output never changes with a library's version, so a
/// seed recorded with a run makes the same questions again.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn range(&mut self, low: i64, high: i64) -> i64 {
        let span = (high - low + 1) as u64;
        low + (self.next() % span) as i64
    }

    fn pick<'a, T>(&mut self, choices: &'a [T]) -> &'a T {
        &choices[self.range(0, choices.len() as i64 - 1) as usize]
    }
}

// ---- Arithmetic ----

fn arithmetic(rng: &mut SplitMix64) -> Made {
    match rng.range(0, 4) {
        0 => {
            let (a, b) = (rng.range(101, 999), rng.range(12, 99));
            whole(format!("What is {a} × {b}?"), a * b)
        }
        1 => {
            let (a, b, c) = (
                rng.range(1000, 9999),
                rng.range(1000, 9999),
                rng.range(100, 999),
            );
            whole(format!("What is {a} + {b} − {c}?"), a + b - c)
        }
        2 => {
            let (divisor, quotient, b) = (rng.range(3, 12), rng.range(11, 199), rng.range(10, 499));
            let a = b + divisor * quotient;
            whole(format!("What is ({a} − {b}) ÷ {divisor}?"), quotient)
        }
        3 => {
            let percent = *rng.pick(&[5, 10, 15, 20, 25, 30, 40, 45, 60, 75]);
            let of = 20 * rng.range(5, 250);
            whole(format!("What is {percent} % of {of}?"), of * percent / 100)
        }
        _ => {
            let low = rng.range(1, 60);
            let high = low + rng.range(10, 90);
            whole(
                format!("What is the sum of the integers from {low} to {high}, both included?"),
                (low + high) * (high - low + 1) / 2,
            )
        }
    }
}

// ---- Unit conversions ----

const KM: Unit = Unit {
    symbol: "km",
    names: &["km", "kilometre", "kilometres", "kilometer", "kilometers"],
};
const CM: Unit = Unit {
    symbol: "cm",
    names: &[
        "cm",
        "centimetre",
        "centimetres",
        "centimeter",
        "centimeters",
    ],
};
const M: Unit = Unit {
    symbol: "m",
    names: &["m", "metre", "metres", "meter", "meters"],
};
const KG: Unit = Unit {
    symbol: "kg",
    names: &["kg", "kilogram", "kilograms", "kilo", "kilos"],
};
const G: Unit = Unit {
    symbol: "g",
    names: &["g", "gram", "grams"],
};
const ML: Unit = Unit {
    symbol: "mL",
    names: &[
        "ml",
        "millilitre",
        "millilitres",
        "milliliter",
        "milliliters",
    ],
};
const MIB: Unit = Unit {
    symbol: "MiB",
    names: &["mib", "mebibyte", "mebibytes"],
};
const MIN: Unit = Unit {
    symbol: "min",
    names: &["min", "mins", "minute", "minutes"],
};
const FAHRENHEIT: Unit = Unit {
    symbol: "°F",
    names: &[
        "°f",
        "° f",
        "ºf",
        "f",
        "degrees f",
        "degrees fahrenheit",
        "fahrenheit",
    ],
};
const CELSIUS: Unit = Unit {
    symbol: "°C",
    names: &[
        "°c",
        "° c",
        "ºc",
        "c",
        "degrees c",
        "degrees celsius",
        "celsius",
    ],
};

/// From (in words), to (in words), the unit answered in, and the conversion.
type Conversion = (&'static str, &'static str, &'static Unit, fn(f64) -> f64);

const CONVERSIONS: &[Conversion] = &[
    ("miles", "kilometres", &KM, |x| x * 1.609_344),
    ("inches", "centimetres", &CM, |x| x * 2.54),
    ("feet", "metres", &M, |x| x * 0.3048),
    ("pounds", "kilograms", &KG, |x| x * 0.453_592_37),
    ("ounces", "grams", &G, |x| x * 28.349_523_125),
    ("US gallons", "millilitres", &ML, |x| x * 3_785.411_784),
    ("GiB", "MiB", &MIB, |x| x * 1024.0),
    ("hours", "minutes", &MIN, |x| x * 60.0),
    ("degrees Celsius", "degrees Fahrenheit", &FAHRENHEIT, |x| {
        x * 9.0 / 5.0 + 32.0
    }),
    ("degrees Fahrenheit", "degrees Celsius", &CELSIUS, |x| {
        (x - 32.0) * 5.0 / 9.0
    }),
];

fn conversion(rng: &mut SplitMix64) -> Made {
    let (from, to, unit, convert) = *rng.pick(CONVERSIONS);
    // A value with up to one decimal: 0.5 to 250.
    let value = rng.range(5, 2500) as f64 / 10.0;
    let result = (convert(value) * 100.0).round() / 100.0;
    Made {
        prompt: format!(
            "Convert {value} {from} to {to}. Give the number rounded to 2 decimal places, followed by the unit ({}).",
            unit.symbol
        ),
        answer: format!("{} {}", trimmed(result), unit.symbol),
        // Half a unit in the last place, so the unrounded figure passes too.
        check: Check::Number {
            unit: Some(unit),
            tolerance: 0.005 + 1e-9,
        },
    }
}

/// A number rounded to 2 decimals without trailing zeros: 3.50 → 3.5, 4.00 → 4.
fn trimmed(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

// ---- Dates ----

fn random_date(rng: &mut SplitMix64) -> Date {
    let (year, month) = (rng.range(1990, 2035) as i32, rng.range(1, 12) as u32);
    let day = rng.range(1, i64::from(Date::days_in_month(year, month))) as u32;
    Date { year, month, day }
}

fn date_question(rng: &mut SplitMix64) -> Made {
    let start = random_date(rng);
    match rng.range(0, 2) {
        0 => {
            let days = rng.range(20, 400);
            let (word, signed) = if rng.range(0, 1) == 0 {
                ("after", days)
            } else {
                ("before", -days)
            };
            Made {
                prompt: format!(
                    "What date is {days} days {word} {}? Give it in ISO form, YYYY-MM-DD.",
                    start.iso()
                ),
                answer: start.plus_days(signed).iso(),
                check: Check::Date,
            }
        }
        1 => {
            let end = start.plus_days(rng.range(15, 700));
            whole(
                format!(
                    "How many days are there from {} to {}? Count the days between them (from the first to the second is 1 day when they are consecutive).",
                    start.iso(),
                    end.iso()
                ),
                end.day_number() - start.day_number(),
            )
        }
        _ => Made {
            prompt: format!(
                "On which day of the week did {} fall? Answer with the day's English name.",
                start.iso()
            ),
            answer: start.weekday().to_owned(),
            check: Check::Exact,
        },
    }
}

// ---- Strings ----

/// A word no dictionary has: two to four consonant-vowel syllables.
fn pseudo_word(rng: &mut SplitMix64, syllables: (i64, i64)) -> String {
    const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    (0..rng.range(syllables.0, syllables.1))
        .flat_map(|_| [*rng.pick(CONSONANTS) as char, *rng.pick(VOWELS) as char])
        .collect()
}

fn string_question(rng: &mut SplitMix64) -> Made {
    let exact = |prompt: String, answer: String| Made {
        prompt,
        answer,
        check: Check::Exact,
    };
    match rng.range(0, 3) {
        0 => {
            let word = pseudo_word(rng, (3, 5));
            exact(
                format!("Write the word '{word}' backwards."),
                word.chars().rev().collect(),
            )
        }
        1 => {
            let words: Vec<String> = (0..3).map(|_| pseudo_word(rng, (2, 4))).collect();
            let text = words.join(" ");
            let letter = *rng.pick(&text.chars().filter(|c| *c != ' ').collect::<Vec<_>>());
            whole(
                format!("How many times does the letter '{letter}' appear in '{text}'?"),
                text.chars().filter(|c| *c == letter).count() as i64,
            )
        }
        2 => {
            let mut words: Vec<String> = Vec::new();
            while words.len() < 5 {
                let word = pseudo_word(rng, (2, 3));
                if !words.contains(&word) {
                    words.push(word);
                }
            }
            let position = rng.range(1, 5) as usize;
            let listed = words.join(", ");
            words.sort();
            exact(
                format!(
                    "Sort these words alphabetically and give the {} one: {listed}.",
                    ordinal(position)
                ),
                words[position - 1].clone(),
            )
        }
        _ => {
            let words: Vec<String> = (0..rng.range(4, 6))
                .map(|_| pseudo_word(rng, (2, 3)))
                .collect();
            exact(
                format!(
                    "Join the last letters of these words, in order, into one string: {}.",
                    words.join(" ")
                ),
                words.iter().filter_map(|w| w.chars().last()).collect(),
            )
        }
    }
}

fn ordinal(n: usize) -> &'static str {
    ["first", "second", "third", "fourth", "fifth"][n - 1]
}

// ---- Code tracing ----

fn code_trace(rng: &mut SplitMix64) -> Made {
    let python = |code: String, answer: i64| {
        whole(format!("What does this Python print?\n\n{code}"), answer)
    };
    match rng.range(0, 3) {
        0 => {
            let (low, modulus) = (rng.range(0, 20), rng.range(2, 5));
            let (high, remainder) = (low + rng.range(8, 25), rng.range(0, modulus - 1));
            let sum: i64 = (low..high).filter(|i| i % modulus == remainder).sum();
            python(
                format!("s = 0\nfor i in range({low}, {high}):\n    if i % {modulus} == {remainder}:\n        s += i\nprint(s)"),
                sum,
            )
        }
        1 => {
            let (mut a, mut b, steps) = (rng.range(0, 5), rng.range(1, 6), rng.range(3, 9));
            let code =
                format!("a, b = {a}, {b}\nfor _ in range({steps}):\n    a, b = b, a + b\nprint(a)");
            for _ in 0..steps {
                (a, b) = (b, a + b);
            }
            python(code, a)
        }
        2 => {
            let values: Vec<i64> = (0..7).map(|_| rng.range(1, 60)).collect();
            let index = rng.range(0, 6) as usize;
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let listed: Vec<String> = values.iter().map(i64::to_string).collect();
            python(
                format!("x = [{}]\nprint(sorted(x)[{index}])", listed.join(", ")),
                sorted[index],
            )
        }
        _ => {
            let (start, divisor) = (rng.range(50, 5000), rng.range(2, 3));
            let (mut n, mut count) = (start, 0);
            while n > 1 {
                n /= divisor;
                count += 1;
            }
            python(
                format!("n = {start}\nc = 0\nwhile n > 1:\n    n = n // {divisor}\n    c += 1\nprint(c)"),
                count,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_category(category: &str, count: u32) -> Vec<Item> {
        items(7, count)
            .into_iter()
            .filter(|i| i.category == category)
            .collect()
    }

    #[test]
    fn a_seed_makes_the_same_items_and_a_longer_probe_starts_with_the_shorter_one() {
        assert_eq!(items(42, 50), items(42, 50));
        assert_eq!(items(42, 200)[..50], items(42, 50)[..]);
        assert_ne!(items(42, 50), items(43, 50));
        let ids: std::collections::BTreeSet<String> =
            items(42, 500).into_iter().map(|i| i.id).collect();
        assert_eq!(ids.len(), 500, "ids are unique");
        let first: Vec<&str> = items(1, 5).iter().map(|i| i.category).collect();
        assert_eq!(first, CATEGORIES);
        assert_eq!(items(1, 6)[5].id, "arithmetic-2");
    }

    #[test]
    fn items_vary_within_a_category() {
        for category in CATEGORIES {
            let prompts: std::collections::BTreeSet<String> = of_category(category, 500)
                .into_iter()
                .map(|i| i.prompt)
                .collect();
            assert!(
                prompts.len() >= 95,
                "{category}: {} distinct",
                prompts.len()
            );
        }
    }

    /// The arithmetic answers, recomputed from the prompt's own numbers.
    #[test]
    fn arithmetic_answers_follow_from_their_prompts() {
        for item in of_category("arithmetic", 500) {
            let numbers: Vec<i64> = item
                .prompt
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse().ok())
                .collect();
            let answer: i64 = item.answer.parse().expect("a whole number");
            let p = &item.prompt;
            let want = if p.contains('×') {
                numbers[0] * numbers[1]
            } else if p.contains('÷') {
                (numbers[0] - numbers[1]) / numbers[2]
            } else if p.contains('%') {
                numbers[0] * numbers[1] / 100
            } else if p.contains("sum of") {
                (numbers[0]..=numbers[1]).sum()
            } else {
                numbers[0] + numbers[1] - numbers[2]
            };
            assert_eq!(answer, want, "{p}");
            if p.contains('÷') {
                assert_eq!((numbers[0] - numbers[1]) % numbers[2], 0, "{p} divides");
            }
        }
    }

    #[test]
    fn conversions_are_rounded_and_carry_their_unit() {
        let mut seen = std::collections::BTreeSet::new();
        for item in of_category("units", 500) {
            let (number, unit) = item.answer.split_once(' ').expect("number and unit");
            let value: f64 = number.parse().expect("a number");
            assert!(
                (value * 100.0 - (value * 100.0).round()).abs() < 1e-6,
                "{}",
                item.answer
            );
            let Check::Number { unit: Some(u), .. } = item.check else {
                panic!("{} has no unit", item.id)
            };
            assert_eq!(u.symbol, unit);
            seen.insert(unit.to_owned());
        }
        assert!(seen.len() >= 8, "{seen:?}");
        // Known conversions, through the table itself.
        let convert = |from: &str| CONVERSIONS.iter().find(|c| c.0 == from).expect("a row").3;
        assert!((convert("miles")(26.2) - 42.164_812_8).abs() < 1e-9);
        assert!((convert("degrees Celsius")(37.0) - 98.6).abs() < 1e-9);
        assert!((convert("degrees Fahrenheit")(212.0) - 100.0).abs() < 1e-9);
        assert_eq!(trimmed(3.5), "3.5");
        assert_eq!(trimmed(4.0), "4");
        assert_eq!(trimmed(0.125_f64.max(0.13)), "0.13");
    }

    /// Date answers checked by counting days one at a time rather than by day numbers.
    #[test]
    fn date_answers_agree_with_walking_the_calendar() {
        let next_day = |d: Date| {
            if d.day < Date::days_in_month(d.year, d.month) {
                Date {
                    day: d.day + 1,
                    ..d
                }
            } else if d.month < 12 {
                Date {
                    month: d.month + 1,
                    day: 1,
                    ..d
                }
            } else {
                Date {
                    year: d.year + 1,
                    month: 1,
                    day: 1,
                }
            }
        };
        let dates_in = |text: &str| -> Vec<Date> {
            text.split(|c: char| !(c.is_ascii_digit() || c == '-'))
                .filter_map(|w| Date::parse_iso(w.trim_matches('-')))
                .collect()
        };
        for item in of_category("dates", 300) {
            let dates = dates_in(&item.prompt);
            match item.check {
                Check::Date => {
                    let answer = Date::parse_iso(&item.answer).expect("an ISO date");
                    let days: usize = item
                        .prompt
                        .split(' ')
                        .nth(3)
                        .and_then(|n| n.parse().ok())
                        .expect("a count");
                    let (mut from, to) = if item.prompt.contains("after") {
                        (dates[0], answer)
                    } else {
                        (answer, dates[0])
                    };
                    for _ in 0..days {
                        from = next_day(from);
                    }
                    assert_eq!(from, to, "{}", item.prompt);
                }
                Check::Exact => {
                    // 2024-01-01 was a Monday; count from there.
                    let monday = Date {
                        year: 2024,
                        month: 1,
                        day: 1,
                    };
                    let (mut a, b) = (monday.min(dates[0]), monday.max(dates[0]));
                    let mut steps = 0;
                    while a != b {
                        a = next_day(a);
                        steps += 1;
                    }
                    let offset = if dates[0] >= monday {
                        steps
                    } else {
                        (7 - steps % 7) % 7
                    };
                    assert_eq!(
                        item.answer,
                        super::super::calendar::WEEKDAYS[offset % 7],
                        "{}",
                        item.prompt
                    );
                }
                Check::Number { .. } => {
                    let (mut a, mut steps) = (dates[0], 0);
                    while a != dates[1] {
                        a = next_day(a);
                        steps += 1;
                    }
                    assert_eq!(item.answer, steps.to_string(), "{}", item.prompt);
                }
            }
        }
    }

    #[test]
    fn string_answers_follow_from_their_prompts() {
        let quoted = |p: &str| -> Vec<String> {
            p.split('\'')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        for item in of_category("strings", 400) {
            let p = &item.prompt;
            if p.contains("backwards") {
                let word = &quoted(p)[0];
                assert_eq!(item.answer, word.chars().rev().collect::<String>(), "{p}");
            } else if p.contains("How many times") {
                let q = quoted(p);
                let count = q[1].matches(q[0].as_str()).count();
                assert_eq!(item.answer, count.to_string(), "{p}");
                assert!(count >= 1);
            } else if p.contains("Sort") {
                let list = p.split(": ").nth(1).expect("a list").trim_end_matches('.');
                let mut words: Vec<&str> = list.split(", ").collect();
                words.sort_unstable();
                let position = ["first", "second", "third", "fourth", "fifth"]
                    .iter()
                    .position(|o| p.contains(&format!("the {o} one")))
                    .expect("an ordinal");
                assert_eq!(item.answer, words[position], "{p}");
            } else {
                let list = p.split(": ").nth(1).expect("a list").trim_end_matches('.');
                let last: String = list.split(' ').filter_map(|w| w.chars().last()).collect();
                assert_eq!(item.answer, last, "{p}");
            }
        }
    }

    /// Code items, traced by a second, independent reading of each snippet.
    #[test]
    fn code_answers_match_running_the_snippet_by_hand() {
        for item in of_category("code", 400) {
            let p = &item.prompt;
            let ints = |line: &str| -> Vec<i64> {
                line.split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse().ok())
                    .collect()
            };
            let lines: Vec<&str> = p.lines().collect();
            let want: i64 = if p.contains("s += i") {
                let range = ints(lines[3]);
                let test = ints(lines[4]);
                (range[0]..range[1])
                    .filter(|i| i % test[0] == test[1])
                    .sum()
            } else if p.contains("a + b") {
                let (start, steps) = (ints(lines[2]), ints(lines[3])[0]);
                let mut sequence = vec![start[0], start[1]];
                while sequence.len() <= steps as usize {
                    let n = sequence.len();
                    sequence.push(sequence[n - 1] + sequence[n - 2]);
                }
                sequence[steps as usize]
            } else if p.contains("sorted") {
                let mut values = ints(lines[2]);
                values.sort_unstable();
                values[ints(lines[3])[0] as usize]
            } else {
                let (start, divisor) = (ints(lines[2])[0], ints(lines[5])[0]);
                // The first k whose k-th division leaves 1 or less (2 // 3 is 0, one more step).
                (1..)
                    .find(|k| start / divisor.pow(*k) <= 1)
                    .expect("a power") as i64
            };
            assert_eq!(item.answer, want.to_string(), "{p}");
        }
    }
}
