//! The text prompts are cut from. Synthetic prompts are seeded random words; realistic ones are
//! four kinds of work people give a local model, over fixed text shipped with Rigdeck (a Rust
//! source file to review, a design document to summarize, word problems to reason through,
//! records to turn into JSON), so runs on different days read the same prompts.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

const CODE: &str = include_str!("../../prompts/code.rs.txt");
const DOCUMENT: &str = include_str!("../../prompts/document.md");

/// One kind of realistic prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    CodeReview,
    Summarization,
    Reasoning,
    StructuredOutput,
}

impl Task {
    pub const ALL: [Task; 4] = [
        Task::CodeReview,
        Task::Summarization,
        Task::Reasoning,
        Task::StructuredOutput,
    ];

    /// What the model is asked to do with the material that follows.
    pub fn instruction(self) -> &'static str {
        match self {
            Task::CodeReview => "Review the Rust code below as a senior engineer would. List real bugs first, then risky spots, then concrete improvements, each with the line it concerns and a suggested change.\n\n```rust\n",
            Task::Summarization => "Summarize the document below for an engineer joining the team: five bullet points on what matters most, then one paragraph on the open risks.\n\n",
            Task::Reasoning => "Solve each problem below. Reason step by step, check your arithmetic, and end each one with a line `Answer: <value>`.\n\n",
            Task::StructuredOutput => "Turn every record below into one JSON array of objects with the keys name, city, date (YYYY-MM-DD), amount_eur (a number) and status. Output only the JSON.\n\n",
        }
    }

    /// At least `words` words of material, the same for the same seed.
    pub fn material(self, words: usize, seed: u64) -> String {
        match self {
            Task::CodeReview => repeat(CODE, words),
            Task::Summarization => repeat(DOCUMENT, words),
            Task::Reasoning => generate(words, seed, problem),
            Task::StructuredOutput => generate(words, seed, record),
        }
    }
}

/// `text` repeated until it has `words` words (long contexts need more than one copy).
fn repeat(text: &str, words: usize) -> String {
    let per_copy = text.split_whitespace().count().max(1);
    let copies = words.div_ceil(per_copy).max(1);
    let mut out = String::with_capacity(text.len() * copies);
    for _ in 0..copies {
        out.push_str(text);
        out.push('\n');
    }
    out
}

/// Items from `item` until there are `words` words.
fn generate(words: usize, seed: u64, item: fn(&mut StdRng, usize) -> String) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = String::new();
    let mut count = 0;
    let mut index = 1;
    while count < words {
        let line = item(&mut rng, index);
        count += line.split_whitespace().count();
        out.push_str(&line);
        out.push('\n');
        index += 1;
    }
    out
}

const NAMES: [&str; 12] = [
    "Ada Lindqvist",
    "Bram Okafor",
    "Chiara Novak",
    "Dmitri Halloran",
    "Elif Moreau",
    "Farid Castellanos",
    "Greta Yamamoto",
    "Hugo Nwosu",
    "Ines Kowalczyk",
    "Jonas Adeyemi",
    "Kaia Fernandes",
    "Luca Brennan",
];
const CITIES: [&str; 10] = [
    "Porto", "Tallinn", "Lyon", "Graz", "Bergen", "Ghent", "Turin", "Krakow", "Leipzig", "Cork",
];
const STATUSES: [&str; 4] = ["paid", "refunded", "pending", "disputed"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

fn record(rng: &mut StdRng, index: usize) -> String {
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let city = CITIES[rng.random_range(0..CITIES.len())];
    let status = STATUSES[rng.random_range(0..STATUSES.len())];
    let month = MONTHS[rng.random_range(0..12)];
    let day = rng.random_range(1..=28);
    let cents: u32 = rng.random_range(1_000..500_000);
    format!(
        "Record {index}: {name} from {city}, {status}, {} euros and {} cents, booked on {month} {day}, 2026.",
        cents / 100,
        cents % 100
    )
}

fn problem(rng: &mut StdRng, index: usize) -> String {
    let a: u32 = rng.random_range(12..240);
    let b: u32 = rng.random_range(3..60);
    let c: u32 = rng.random_range(2..12);
    match rng.random_range(0..4) {
        0 => format!("Problem {index}: A train leaves at 09:{:02} and travels {a} km at {b} km/h, then waits {c} minutes. At what time does it arrive?", b % 60),
        1 => format!("Problem {index}: A warehouse holds {a} crates. Each day {b} arrive and {c} times as many as arrive on the first day leave, capped at what is there. After how many days is it empty?"),
        2 => format!("Problem {index}: The sum of three consecutive odd numbers is {}. What is the largest of them?", 3 * (2 * a + 1) + 6),
        _ => format!("Problem {index}: A recipe for {c} people needs {a} grams of flour and {b} grams of butter. How much of each is needed for {} people, and what is the ratio of flour to butter?", c + b % 7 + 1),
    }
}

/// Seeded random words for synthetic prompts.
pub fn synthetic(words: usize, seed: u64) -> String {
    const WORDS: [&str; 48] = [
        "river", "copper", "lantern", "seven", "quiet", "market", "orbit", "velvet", "maple",
        "signal", "harbor", "ember", "glass", "thunder", "meadow", "pixel", "canyon", "falcon",
        "saddle", "violet", "engine", "marble", "cedar", "winter", "ladder", "comet", "pepper",
        "tunnel", "silver", "garden", "anchor", "prism", "willow", "basket", "rocket", "puzzle",
        "island", "candle", "forest", "mirror", "planet", "shadow", "bridge", "cotton", "feather",
        "valley", "castle", "beacon",
    ];
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = String::with_capacity(words * 7);
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_long_enough_and_the_same_for_a_seed() {
        for task in Task::ALL {
            let text = task.material(20_000, 3);
            assert!(text.split_whitespace().count() >= 20_000, "{task:?}");
            assert_eq!(text, task.material(20_000, 3), "{task:?}");
        }
        assert_ne!(synthetic(50, 1), synthetic(50, 2));
        assert_eq!(synthetic(50, 1).split_whitespace().count(), 50);
    }
}
