//! Prompts of an exact token count. Text is cut from synthetic or realistic material (see
//! [`material`]) until the engine's tokenizer counts exactly the tokens asked for; each
//! request opens with its own tag unless told otherwise, so no request finds another's prompt
//! in the engine's prefix cache. Without a tokenizer, lengths are estimated (four characters a
//! token) and the run says so.

pub mod material;
pub mod tokenizer;

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::spec::PromptSource;
pub use material::Task;
pub use tokenizer::Tokenizer;

/// A built prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub text: String,
    /// The engine tokenizer's count; `None` when estimated.
    pub tokens: Option<usize>,
}

/// What a text is cut from: synthetic words or one realistic task's material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Synthetic,
    Task(Task),
}

/// Builds and remembers prompts for one benchmark.
pub struct PromptBook {
    source: PromptSource,
    seed: u64,
    /// Drawn anew for every benchmark and mixed into the tags, so a second benchmark with the
    /// same seed (same material) still finds nothing of the first's in the prefix cache.
    nonce: u64,
    tokenizer: Option<Tokenizer>,
    /// Fitted texts by (material, role, tokens), so each length is searched for once.
    fitted: HashMap<(Kind, bool, usize), String>,
}

/// Characters per token when there is no tokenizer to ask (English prose and code average
/// about four).
const CHARS_PER_TOKEN: usize = 4;
/// One word that is one token in every tokenizer we know, to pad the last few tokens.
const FILLER: &str = " the";

impl PromptBook {
    pub fn new(source: PromptSource, seed: u64, tokenizer: Option<Tokenizer>) -> Self {
        PromptBook {
            source,
            seed,
            tokenizer,
            nonce: rand::random(),
            fitted: HashMap::new(),
        }
    }

    /// Whether lengths are counted by the engine (else estimated).
    pub fn exact(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Request `index`'s prompt of `tokens` tokens.
    pub async fn prompt(
        &mut self,
        tokens: usize,
        index: u64,
        unique: bool,
    ) -> Result<Prompt, String> {
        let kind = self.kind(index);
        self.build(kind, false, tokens, index, unique).await
    }

    /// Request `index`'s context of `tokens` tokens for a depth run: always its own (the point
    /// is that this request's context, and only it, is in the cache).
    pub async fn context(&mut self, tokens: usize, index: u64) -> Result<Prompt, String> {
        let kind = self.kind(index);
        self.build(kind, true, tokens, index, true).await
    }

    fn kind(&self, index: u64) -> Kind {
        match self.source {
            PromptSource::Synthetic => Kind::Synthetic,
            PromptSource::Realistic => Kind::Task(Task::ALL[(index % 4) as usize]),
        }
    }

    async fn build(
        &mut self,
        kind: Kind,
        context: bool,
        tokens: usize,
        index: u64,
        unique: bool,
    ) -> Result<Prompt, String> {
        let tag = if unique {
            self.tag(index, context)
        } else {
            String::new()
        };
        let Some(tokenizer) = self.tokenizer.clone() else {
            let text = estimate(
                &self.head(kind, context),
                &self.material(kind, context, tokens),
                tokens,
            );
            return Ok(Prompt {
                text: format!("{tag}{text}"),
                tokens: None,
            });
        };
        let key = (kind, context, tokens);
        let body = match self.fitted.get(&key) {
            Some(body) => body.clone(),
            None => {
                let head = format!("{}{}", self.tag(0, context), self.head(kind, context));
                let material = self.material(kind, context, tokens);
                let fitted = fit(&tokenizer, &head, &material, tokens).await?;
                let body = fitted[self.tag(0, context).len()..].to_owned();
                self.fitted.insert(key, body.clone());
                body
            }
        };
        let (text, count) = adjust(&tokenizer, format!("{tag}{body}"), tokens).await?;
        Ok(Prompt {
            text,
            tokens: Some(count),
        })
    }

    /// A distinct opening per request: random hex, so tags share no prefix beyond a word.
    fn tag(&self, index: u64, context: bool) -> String {
        let mut rng = StdRng::seed_from_u64(
            self.seed ^ self.nonce ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(context),
        );
        format!("Ticket {:08X}. ", rng.random::<u32>())
    }

    fn head(&self, kind: Kind, context: bool) -> String {
        match (kind, context) {
            (Kind::Task(task), false) => task.instruction().to_owned(),
            (Kind::Task(_), true) => {
                "Background material for the question that follows.\n\n".to_owned()
            }
            (Kind::Synthetic, _) => String::new(),
        }
    }

    /// Enough material for `tokens` tokens (a token is rarely less than three quarters of a
    /// word, so as many words as tokens is plenty).
    fn material(&self, kind: Kind, context: bool, tokens: usize) -> String {
        let seed = self.seed.wrapping_add(u64::from(context) * 7919);
        let words = tokens + 16;
        match kind {
            Kind::Synthetic => material::synthetic(words, seed),
            Kind::Task(task) => task.material(words, seed),
        }
    }
}

/// `head` plus as much of `material` as makes about `tokens` tokens, by character count.
fn estimate(head: &str, material: &str, tokens: usize) -> String {
    let budget = (tokens * CHARS_PER_TOKEN).saturating_sub(head.len());
    let mut cut = budget.min(material.len());
    while !material.is_char_boundary(cut) {
        cut -= 1;
    }
    let end = material[..cut]
        .rfind(char::is_whitespace)
        .filter(|_| cut < material.len())
        .unwrap_or(cut);
    format!("{head}{}", &material[..end])
}

/// The longest `head` + word prefix of `material` with at most `tokens` tokens, found by
/// bisection on the word count (a few tokenizer calls however long the prompt).
async fn fit(
    tokenizer: &Tokenizer,
    head: &str,
    material: &str,
    tokens: usize,
) -> Result<String, String> {
    let ends: Vec<usize> = word_ends(material);
    let text = |words: usize| {
        let end = if words == 0 { 0 } else { ends[words - 1] };
        format!("{head}{}", &material[..end])
    };
    let (mut low, mut high) = (0usize, ends.len());
    if tokenizer.count(&text(high)).await? <= tokens {
        low = high;
    }
    while low < high {
        let middle = (low + high).div_ceil(2);
        if tokenizer.count(&text(middle)).await? <= tokens {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    Ok(text(low))
}

/// Where each word of `text` ends (byte offsets).
fn word_ends(text: &str) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut in_word = false;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            if in_word {
                ends.push(i);
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    if in_word {
        ends.push(text.len());
    }
    ends
}

/// Trims or pads `text` (a word at a time) to exactly `tokens` tokens where the tokenizer
/// allows; returns the text and its count.
async fn adjust(
    tokenizer: &Tokenizer,
    mut text: String,
    tokens: usize,
) -> Result<(String, usize), String> {
    const MOST_STEPS: usize = 64;
    let mut count = tokenizer.count(&text).await?;
    for _ in 0..MOST_STEPS {
        if count > tokens {
            let Some(cut) = text.trim_end().rfind(char::is_whitespace) else {
                break;
            };
            text.truncate(cut);
        } else if count < tokens {
            text.push_str(FILLER);
        } else {
            break;
        }
        let next = tokenizer.count(&text).await?;
        if count < tokens && next > tokens {
            // The filler merged into more than one token: the closest from below is kept.
            text.truncate(text.len() - FILLER.len());
            break;
        }
        count = next;
    }
    let count = tokenizer.count(&text).await?;
    Ok((text, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_cut_at_a_word() {
        let text = estimate("Do this. ", "alpha beta gamma delta epsilon", 4);
        assert!(text.starts_with("Do this. alpha"), "{text}");
        assert!(!text.ends_with("gam"), "{text}");
        assert!(text.len() <= 16);
    }

    #[test]
    fn word_ends_find_every_word() {
        assert_eq!(word_ends("ab  c\nd"), vec![2, 5, 7]);
        assert!(word_ends("   ").is_empty());
    }
}
