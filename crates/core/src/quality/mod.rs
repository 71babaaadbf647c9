//! Quality measured as KL divergence against a reference: corpora, reference logits, runs.

pub mod corpus;
