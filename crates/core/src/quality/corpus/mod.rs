//! The text a KL-divergence run measures on: the built-in mix shipped with Rigdeck, a text file, or
//! conversations from the chat, each in the model's own chat format.
