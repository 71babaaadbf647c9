//! GGUF metadata values, arrays and the ordered metadata table with typed getters.
//!
//! Arrays are stored typed (`Vec<u32>`, not `Vec<Value>`) and string arrays packed into one
//! buffer: a tokenizer's 150 000 tokens then cost two allocations instead of 150 000, which is
//! most of the time spent reading a large model's header.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::ops::Deref;

/// The value type ids of GGUF (`enum gguf_type` in `ggml/include/gguf.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// 0
    U8,
    /// 1
    I8,
    /// 2
    U16,
    /// 3
    I16,
    /// 4
    U32,
    /// 5
    I32,
    /// 6
    F32,
    /// 7: one byte, non-zero is true (as llama.cpp reads it)
    Bool,
    /// 8: u64 length + UTF-8 bytes
    String,
    /// 9: u32 element type + u64 count + elements
    Array,
    /// 10
    U64,
    /// 11
    I64,
    /// 12
    F64,
}

impl ValueType {
    /// The type with this id, `None` for an id GGUF does not define.
    pub const fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The id stored in GGUF files.
    pub const fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// gguf's short name (`u32`, `str`, `arr` …), used in messages.
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "str",
            ValueType::Array => "arr",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// The fewest bytes one value of this type takes in a file: a string is at least its
    /// length field, an array its element type and count. Used to reject counts that the rest
    /// of the file cannot possibly hold before allocating anything for them.
    pub const fn min_encoded_size(self) -> u64 {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array; every element has the same type. Arrays of arrays hold inner arrays
/// that each carry their own element type, as in gguf-py.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(StringArray),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    /// An array that was checked and counted but not kept (a read with
    /// [`TokenizerArrays::Counted`](crate::read::TokenizerArrays::Counted)): its element type
    /// and length are known, its elements are not.
    Counted {
        elem: ValueType,
        len: usize,
    },
}

/// Strings packed end to end in one buffer, with the end offset of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StringArray {
    text: String,
    ends: Vec<usize>,
}

impl StringArray {
    /// An empty array with room for `n` strings.
    pub fn with_capacity(n: usize) -> Self {
        StringArray {
            text: String::new(),
            ends: Vec::with_capacity(n),
        }
    }

    /// Appends one string.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// Builds the array from concatenated bytes and the end offset of each string, if the
    /// bytes are UTF-8 and every end falls on a character boundary (which together mean every
    /// string is UTF-8); gives the parts back otherwise.
    pub(crate) fn from_utf8_parts(
        text: Vec<u8>,
        ends: Vec<usize>,
    ) -> Result<StringArray, (Vec<u8>, Vec<usize>)> {
        match String::from_utf8(text) {
            Ok(text) if ends.iter().all(|&e| text.is_char_boundary(e)) => {
                Ok(StringArray { text, ends })
            }
            Ok(text) => Err((text.into_bytes(), ends)),
            Err(e) => Err((e.into_bytes(), ends)),
        }
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th string.
    pub fn get(&self, i: usize) -> Option<&str> {
        let start = match i.checked_sub(1) {
            None => 0,
            Some(prev) => *self.ends.get(prev)?,
        };
        let end = *self.ends.get(i)?;
        self.text.get(start..end)
    }

    /// The strings in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// Total bytes of all strings.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }
}

impl<S: AsRef<str>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut out = StringArray::default();
        for s in iter {
            out.push(s.as_ref());
        }
        out
    }
}

impl Serialize for StringArray {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for s in self.iter() {
            seq.serialize_element(s)?;
        }
        seq.end()
    }
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer type as i128, so that callers can range-check once for every width.
    fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer that fits a u64. Converters disagree on widths (`block_count` is u32 in one
    /// file and i32 or u64 in another), so the getters accept them all.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// Any integer that fits a u32.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_i128().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer that fits an i64.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_i128().and_then(|v| i64::try_from(v).ok())
    }

    /// A float of either width, or an integer converted to one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            // Precision loss above 2^53 is irrelevant for the hyper-parameters read this way.
            _ => self.as_i128().map(|v| v as f64),
        }
    }

    /// A bool (or an integer 0/1, as some converters write flags).
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => match self.as_i128()? {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            },
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
            Array::Counted { elem, .. } => *elem,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Counted { len, .. } => *len,
        }
    }

    /// Whether this array, or one inside it, was only counted ([`Array::Counted`]).
    pub fn has_counted(&self) -> bool {
        match self {
            Array::Counted { .. } => true,
            Array::Array(inner) => inner.iter().any(Array::has_counted),
            _ => false,
        }
    }

    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An integer array (any width) as u64s; `None` for other types or negative elements.
    /// Per-layer hyper-parameters (`head_count_kv` of some models) are read this way.
    pub fn to_u64_vec(&self) -> Option<Vec<u64>> {
        fn conv<T: Copy>(v: &[T]) -> Option<Vec<u64>>
        where
            u64: TryFrom<T>,
        {
            v.iter().map(|&x| u64::try_from(x).ok()).collect()
        }
        match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => conv(v),
            _ => None,
        }
    }

    /// A bool array, or an integer array of 0/1 flags.
    pub fn to_bool_vec(&self) -> Option<Vec<bool>> {
        match self {
            Array::Bool(v) => Some(v.clone()),
            _ => self
                .to_u64_vec()?
                .into_iter()
                .map(|x| match x {
                    0 => Some(false),
                    1 => Some(true),
                    _ => None,
                })
                .collect(),
        }
    }

    /// The strings, if this is a string array.
    pub fn as_strings(&self) -> Option<&StringArray> {
        match self {
            Array::String(s) => Some(s),
            _ => None,
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::U8(v) => s.serialize_u8(*v),
            Value::I8(v) => s.serialize_i8(*v),
            Value::U16(v) => s.serialize_u16(*v),
            Value::I16(v) => s.serialize_i16(*v),
            Value::U32(v) => s.serialize_u32(*v),
            Value::I32(v) => s.serialize_i32(*v),
            Value::F32(v) => s.serialize_f32(*v),
            Value::Bool(v) => s.serialize_bool(*v),
            Value::String(v) => s.serialize_str(v),
            Value::Array(v) => v.serialize(s),
            Value::U64(v) => s.serialize_u64(*v),
            Value::I64(v) => s.serialize_i64(*v),
            Value::F64(v) => s.serialize_f64(*v),
        }
    }
}

impl Serialize for Array {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Array::U8(v) => v.serialize(s),
            Array::I8(v) => v.serialize(s),
            Array::U16(v) => v.serialize(s),
            Array::I16(v) => v.serialize(s),
            Array::U32(v) => v.serialize(s),
            Array::I32(v) => v.serialize(s),
            Array::F32(v) => v.serialize(s),
            Array::Bool(v) => v.serialize(s),
            Array::String(v) => v.serialize(s),
            Array::Array(v) => v.serialize(s),
            Array::U64(v) => v.serialize(s),
            Array::I64(v) => v.serialize(s),
            Array::F64(v) => v.serialize(s),
            Array::Counted { elem, len } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("counted", len)?;
                map.serialize_entry("type", elem.name())?;
                map.end()
            }
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::$variant(v) }
        })*
    };
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, Array => Array, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}

macro_rules! array_from {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Self { Value::Array(Array::$variant(v)) }
        })*
    };
}
array_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, Array => Array, u64 => U64, i64 => I64, f64 => F64);

impl From<StringArray> for Value {
    fn from(v: StringArray) -> Self {
        Value::Array(Array::String(v))
    }
}

impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Self {
        Value::Array(Array::String(v.into_iter().collect()))
    }
}

/// The metadata of a GGUF file: key/value pairs in file order, with typed getters.
///
/// Dereferences to the slice of pairs; keys are unique (the reader rejects duplicates).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
}

impl Metadata {
    /// Wraps pairs as they are; the caller keeps keys unique.
    pub fn from_entries(entries: Vec<(String, Value)>) -> Self {
        Metadata { entries }
    }

    /// The pairs, in file order.
    pub fn into_entries(self) -> Vec<(String, Value)> {
        self.entries
    }

    /// Sets a key: replaces the value in place if present (keeping the order), appends otherwise.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key.to_owned(), value)),
        }
    }

    /// Appends a pair without checking for an existing key (for malformed test fixtures).
    pub(crate) fn push_unchecked(&mut self, key: String, value: Value) {
        self.entries.push((key, value));
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// An integer of any width that fits a u32.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// An integer of any width that fits a u64.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An integer of any width that fits an i64.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// A float of either width (or an integer), narrowed to f32.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        // Narrowing is the point of this getter; hyper-parameters fit f32.
        self.get(key)?.as_f64().map(|v| v as f32)
    }

    /// A float of either width (or an integer).
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }

    /// A bool.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// A string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// An array.
    pub fn get_arr(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    /// An integer array of any width as u64s.
    pub fn get_u64_array(&self, key: &str) -> Option<Vec<u64>> {
        self.get_arr(key)?.to_u64_vec()
    }
}

impl Deref for Metadata {
    type Target = [(String, Value)];

    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

impl Serialize for Metadata {
    /// A JSON object in file order.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_ids_round_trip() {
        for id in 0..13 {
            assert_eq!(ValueType::from_id(id).unwrap().id(), id);
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn getters_tolerate_integer_widths() {
        let mut m = Metadata::default();
        m.set("a", Value::I32(78));
        m.set("b", Value::U64(1 << 40));
        m.set("c", Value::I8(-1));
        m.set("d", Value::F64(0.5));
        assert_eq!(m.get_u32("a"), Some(78));
        assert_eq!(m.get_u64("a"), Some(78));
        assert_eq!(m.get_u32("b"), None);
        assert_eq!(m.get_u64("b"), Some(1 << 40));
        assert_eq!(m.get_u64("c"), None);
        assert_eq!(m.get_i64("c"), Some(-1));
        assert_eq!(m.get_f32("d"), Some(0.5));
        assert_eq!(m.get_f64("a"), Some(78.0));
        assert_eq!(m.get_str("a"), None);
    }

    #[test]
    fn set_replaces_in_place() {
        let mut m = Metadata::default();
        m.set("x", 1u32.into());
        m.set("y", 2u32.into());
        m.set("x", 3u32.into());
        let keys: Vec<_> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["x", "y"]);
        assert_eq!(m.get_u32("x"), Some(3));
    }

    #[test]
    fn string_array_packs_and_indexes() {
        let a: StringArray = ["", "a", "héllo", ""].into_iter().collect();
        assert_eq!(a.len(), 4);
        assert_eq!(a.get(0), Some(""));
        assert_eq!(a.get(2), Some("héllo"));
        assert_eq!(a.get(3), Some(""));
        assert_eq!(a.get(4), None);
        assert_eq!(a.iter().collect::<Vec<_>>(), ["", "a", "héllo", ""]);
    }

    #[test]
    fn arrays_convert_to_per_layer_vectors() {
        assert_eq!(Array::I32(vec![8, 0, 8]).to_u64_vec(), Some(vec![8, 0, 8]));
        assert_eq!(Array::I32(vec![-1]).to_u64_vec(), None);
        assert_eq!(Array::U8(vec![1, 0]).to_bool_vec(), Some(vec![true, false]));
        assert_eq!(Array::F32(vec![1.0]).to_u64_vec(), None);
    }

    #[test]
    fn metadata_serialises_as_an_ordered_object() {
        let mut m = Metadata::default();
        m.set("z", "last".into());
        m.set("a", Value::from(vec!["x", "y"]));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"z":"last","a":["x","y"]}"#
        );
    }
}
