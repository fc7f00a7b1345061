//! Parsing and validating a GGUF file: the bounds-checked cursor, the header,
//! metadata and tensor table, and [`GgufFile`], which owns the bytes.
//!
//! Every count read from the file is checked against the bytes that remain
//! before anything is allocated for it, and every size is computed with
//! checked arithmetic, so hostile input yields an error rather than a panic
//! or a giant allocation.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::error::{GgufError, Result};
use crate::value::{type_id, Array, Value};
use crate::GgmlType;

/// Version ids this reader accepts. v2 and v3 share a layout for
/// little-endian files; v3 only added (big-endian) variants.
const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;
/// Alignment used when general.alignment is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest array nesting accepted; bounds the parser's recursion.
pub const MAX_ARRAY_DEPTH: u32 = 16;

/// Smallest encodings, used to reject impossible counts before allocating.
/// A KV pair is at least a key length, a type id and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// A tensor info is at least a name length, n_dims, one dim, type and offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// A tensor's entry in the tensor table, already validated against the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the row length (contiguous in memory).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Elements per row (`dims[0]`).
    pub fn row_len(&self) -> usize {
        // Validation guarantees at least one dim and that counts fit usize.
        self.dims[0] as usize
    }

    /// Number of rows: the product of `dims[1..]` (1 for a vector).
    pub fn n_rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        (self.n_bytes / self.n_rows() as u64) as usize
    }
}

/// The bytes behind a [`GgufFile`].
enum Storage {
    Mmap(memmap2::Mmap),
    /// A copy in anonymous memory; `len` excludes the one padding byte an
    /// empty file gets (a mapping cannot be empty).
    Anon {
        map: memmap2::Mmap,
        len: usize,
    },
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Anon { map, len } => &map[..*len],
            Storage::Owned(v) => v,
        }
    }
}

/// Where a model file's bytes live while it is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Mapped from the file (llama.cpp's default): fast to open, pages come
    /// from the page cache, in 4 KiB pages.
    Mmap,
    /// Read into anonymous memory advised for transparent huge pages. Decode
    /// streams every weight byte per token; with 2 MiB pages the hardware
    /// prefetchers are not stopped at every 4 KiB page boundary, and a
    /// two-thread Q8_0 matvec ran at 16.1 GB/s against 11.1 GB/s mapped on
    /// the development machine.
    HugePages,
}

impl Backing {
    /// [`Backing::HugePages`] where the kernel offers transparent huge pages
    /// (Linux with THP not `never`), else [`Backing::Mmap`], which then
    /// loses nothing.
    pub fn preferred() -> Backing {
        match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
            Ok(s) if !s.contains("[never]") => Backing::HugePages,
            _ => Backing::Mmap,
        }
    }
}

/// A parsed, validated GGUF file that owns its bytes (a read-only mmap or a
/// `Vec<u8>`). Tensor data is borrowed from those bytes, never copied.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("file_size", &self.storage.bytes().len())
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

/// Opens `path` for reading if it is a regular file (or a link to one).
/// Anything else is refused by name before it is opened: a directory opens
/// and then fails to map with "No such device", and opening a FIFO blocks
/// until some other process writes to it.
fn open_regular(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::FileTypeExt;
    let io_err = |reason| GgufError::Io {
        path: path.to_path_buf(),
        reason,
    };
    let kind = std::fs::metadata(path).map_err(io_err)?.file_type();
    let what = if kind.is_file() {
        return std::fs::File::open(path).map_err(io_err);
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "something other than a regular file"
    };
    Err(GgufError::NotAFile {
        path: path.to_path_buf(),
        what,
    })
}

impl GgufFile {
    /// Memory-maps `path` read-only and parses it.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io_err = |reason| GgufError::Io {
            path: path.to_path_buf(),
            reason,
        };
        let file = open_regular(path)?;
        // SAFETY: the map is read-only and we never hand out mutable access.
        // Soundness additionally assumes the file is not truncated or
        // rewritten by another process while mapped; that is the usual
        // contract for memory-mapped model files and cannot be enforced here.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
        Self::parse(Storage::Mmap(map))
    }

    /// Opens `path` with its bytes held as `backing` says.
    pub fn open_backed(path: impl AsRef<Path>, backing: Backing) -> Result<GgufFile> {
        match backing {
            Backing::Mmap => Self::open(path),
            Backing::HugePages => Self::read_to_huge_pages(path.as_ref()),
        }
    }

    /// Reads the whole file into a fresh anonymous mapping advised for huge
    /// pages. `read` fills it without mapping the file, so the page cache
    /// does not count towards the process's resident memory as well.
    fn read_to_huge_pages(path: &Path) -> Result<GgufFile> {
        use std::io::Read;
        let io_err = |reason| GgufError::Io {
            path: path.to_path_buf(),
            reason,
        };
        let mut file = open_regular(path)?;
        let len = file.metadata().map_err(io_err)?.len();
        let len = usize::try_from(len).map_err(|_| {
            io_err(std::io::Error::other(format!(
                "file of {len} bytes does not fit in memory"
            )))
        })?;
        let mut map = memmap2::MmapMut::map_anon(len.max(1)).map_err(io_err)?;
        #[cfg(target_os = "linux")]
        {
            // Best effort: without huge pages the bytes are still correct.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        file.read_exact(&mut map[..len]).map_err(io_err)?;
        let map = map.make_read_only().map_err(io_err)?;
        Self::parse(Storage::Anon { map, len })
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(Storage::Owned(bytes))
    }

    fn parse(storage: Storage) -> Result<GgufFile> {
        let parsed = parse(storage.bytes())?;
        let key_index = parsed
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = parsed
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            storage,
            version: parsed.version,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
            metadata: parsed.metadata,
            key_index,
            tensors: parsed.tensors,
            tensor_index,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// general.alignment, or 32 when absent.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset where the tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    /// Any integer value that fits in u32.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// Any non-negative integer value.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// Any integer value that fits in i64.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// F32, F64 or any integer value.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    pub fn get_str_array(&self, key: &str) -> Option<&[String]> {
        match self.get_array(key)? {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    pub fn get_f32_array(&self, key: &str) -> Option<&[f32]> {
        match self.get_array(key)? {
            Array::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn get_i32_array(&self, key: &str) -> Option<&[i32]> {
        match self.get_array(key)? {
            Array::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor from this file's table.
    ///
    /// # Panics
    /// Only if `t` describes bytes outside this file, which cannot happen for
    /// a `TensorInfo` taken from this file (its bounds were checked at open).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes = self.storage.bytes();
        let range = usize::try_from(t.offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(usize::try_from(t.n_bytes).ok()?)?))
            .filter(|r| r.end <= bytes.len());
        match range {
            Some(r) => &bytes[r],
            None => panic!(
                "tensor '{}' (offset {}, {} bytes) is not inside this {}-byte GGUF file",
                t.name,
                t.offset,
                t.n_bytes,
                bytes.len()
            ),
        }
    }

    /// general.architecture.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }
}

/// Everything parsed out of a file, before it is attached to its storage.
struct Parsed {
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
}

/// A bounds-checked little-endian reader over the file bytes.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Takes `n` bytes; `what` describes them for the error message and is
    /// only evaluated on failure.
    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos(),
                needed: n,
                file_size: self.buf.len() as u64,
            });
        }
        // n <= remaining, so it fits in usize.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        Ok(b.try_into().expect("take returned N bytes"))
    }

    fn u8(&mut self, what: impl FnOnce() -> String) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Rejects `count` items of at least `min_each` bytes when the rest of
    /// the file cannot possibly hold them. Call before allocating for them.
    fn check_count(&self, count: u64, min_each: u64, what: impl FnOnce() -> String) -> Result<()> {
        let remaining = self.remaining();
        match count.checked_mul(min_each) {
            Some(need) if need <= remaining => Ok(()),
            need => Err(GgufError::ImpossibleCount {
                what: what(),
                count,
                min_bytes: need.unwrap_or(u64::MAX),
                remaining,
                offset: self.pos(),
            }),
        }
    }

    /// A u64-length-prefixed UTF-8 string.
    fn string(&mut self, what: impl Fn() -> String) -> Result<String> {
        let len = self.u64(|| format!("length of {}", what()))?;
        let start = self.pos();
        let bytes = self.take(len, || format!("{} ({len} bytes)", what()))?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(source) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: start + source.valid_up_to() as u64,
                source,
            }),
        }
    }
}

fn parse(buf: &[u8]) -> Result<Parsed> {
    let mut c = Cursor { buf, pos: 0 };

    // A short file that starts like "GGUF" is truncated; anything else is not GGUF.
    if buf.len() < 4 && !b"GGUF".starts_with(buf) {
        return Err(GgufError::BadMagic {
            found: buf.to_vec(),
        });
    }
    let magic = c.take(4, || "magic".into())?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = c.u32(|| "version".into())?;
    if !SUPPORTED_VERSIONS.contains(&version) {
        // A big-endian writer stores a small version as e.g. 00 00 00 03,
        // which reads as a huge little-endian number with zero low bits.
        let swapped = version.swap_bytes();
        if version & 0xffff == 0 && swapped != 0 {
            return Err(GgufError::BigEndian {
                raw: version,
                swapped,
            });
        }
        return Err(GgufError::UnsupportedVersion { version });
    }

    let n_tensors = c.u64(|| "tensor count".into())?;
    let n_kv = c.u64(|| "metadata entry count".into())?;
    c.check_count(n_kv, MIN_KV_BYTES, || "metadata entry count".into())?;

    let metadata = read_metadata(&mut c, n_kv)?;
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) => u64::from(*a),
        Some((_, other)) => {
            return Err(GgufError::AlignmentType {
                found: other.type_name(),
            })
        }
    };
    if !alignment.is_power_of_two() {
        return Err(GgufError::BadAlignment { alignment });
    }

    c.check_count(n_tensors, MIN_TENSOR_INFO_BYTES, || "tensor count".into())?;
    let raw_tensors = read_tensor_infos(&mut c, n_tensors)?;

    // The data section starts at the next multiple of the alignment.
    let data_offset = c
        .pos()
        .checked_next_multiple_of(alignment)
        .expect("alignment is nonzero and the position is a small file offset");
    let file_size = buf.len() as u64;
    let mut tensors = Vec::with_capacity(raw_tensors.len());
    for (t, rel) in raw_tensors {
        if rel % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name,
                offset: rel,
                alignment,
            });
        }
        let offset = data_offset.checked_add(rel);
        let end = offset.and_then(|o| o.checked_add(t.n_bytes));
        match (offset, end) {
            (Some(offset), Some(end)) if end <= file_size => {
                tensors.push(TensorInfo { offset, ..t })
            }
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name,
                    offset: offset.unwrap_or(u64::MAX),
                    size: t.n_bytes,
                    file_size,
                })
            }
        }
    }
    check_no_overlap(&tensors)?;

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        tensors,
    })
}

fn read_metadata(c: &mut Cursor<'_>, n_kv: u64) -> Result<Vec<(String, Value)>> {
    // n_kv was checked against the remaining bytes, so this capacity is
    // bounded by the file size.
    let mut out = Vec::with_capacity(n_kv as usize);
    let mut seen = HashSet::new();
    for index in 0..n_kv {
        let key_offset = c.pos();
        let key = c.string(|| format!("key of metadata entry #{index}"))?;
        if key.is_empty() {
            return Err(GgufError::EmptyKey {
                index,
                offset: key_offset,
            });
        }
        if !seen.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key, index });
        }
        let ty = c.u32(|| format!("value type of metadata key '{key}'"))?;
        let value = read_value(c, &key, ty, 0)?;
        out.push((key, value));
    }
    Ok(out)
}

/// Reads one value of type `ty`; `depth` counts enclosing arrays.
fn read_value(c: &mut Cursor<'_>, key: &str, ty: u32, depth: u32) -> Result<Value> {
    let what = || format!("value of metadata key '{key}'");
    Ok(match ty {
        type_id::U8 => Value::U8(c.u8(what)?),
        type_id::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
        type_id::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        type_id::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        type_id::U32 => Value::U32(c.u32(what)?),
        type_id::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        type_id::U64 => Value::U64(c.u64(what)?),
        type_id::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        type_id::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        type_id::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        type_id::BOOL => Value::Bool(read_bool(c, key, what)?),
        type_id::STRING => Value::String(c.string(what)?),
        type_id::ARRAY => Value::Array(read_array(c, key, depth)?),
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                type_id: ty,
                offset: c.pos() - 4,
            })
        }
    })
}

fn read_bool(c: &mut Cursor<'_>, key: &str, what: impl FnOnce() -> String) -> Result<bool> {
    let offset = c.pos();
    match c.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::InvalidBool {
            key: key.to_owned(),
            byte,
            offset,
        }),
    }
}

/// Reads an array header (element type, length) and its elements.
fn read_array(c: &mut Cursor<'_>, key: &str, depth: u32) -> Result<Array> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            key: key.to_owned(),
            max: MAX_ARRAY_DEPTH,
            offset: c.pos(),
        });
    }
    let elem_ty = c.u32(|| format!("array element type of metadata key '{key}'"))?;
    let Some(min_each) = type_id::min_encoded_size(elem_ty) else {
        return Err(GgufError::UnknownValueType {
            key: key.to_owned(),
            type_id: elem_ty,
            offset: c.pos() - 4,
        });
    };
    let n = c.u64(|| format!("array length of metadata key '{key}'"))?;
    c.check_count(n, min_each, || {
        format!("length of {} array '{key}'", type_id::name(elem_ty))
    })?;
    // From here n * min_each <= remaining bytes, so n fits in usize and every
    // allocation below is bounded by the file size.
    let n_usize = n as usize;

    // Fixed-size elements: take all bytes at once, then decode.
    macro_rules! fixed {
        ($variant:ident, $t:ty) => {{
            let bytes = c.take(n * min_each, || format!("elements of array '{key}'"))?;
            Array::$variant(
                bytes
                    .chunks_exact(std::mem::size_of::<$t>())
                    .map(|b| <$t>::from_le_bytes(b.try_into().expect("chunk size")))
                    .collect(),
            )
        }};
    }

    Ok(match elem_ty {
        type_id::U8 => Array::U8(c.take(n, || format!("elements of array '{key}'"))?.to_vec()),
        type_id::I8 => fixed!(I8, i8),
        type_id::U16 => fixed!(U16, u16),
        type_id::I16 => fixed!(I16, i16),
        type_id::U32 => fixed!(U32, u32),
        type_id::I32 => fixed!(I32, i32),
        type_id::U64 => fixed!(U64, u64),
        type_id::I64 => fixed!(I64, i64),
        type_id::F32 => fixed!(F32, f32),
        type_id::F64 => fixed!(F64, f64),
        type_id::BOOL => {
            let mut v = Vec::with_capacity(n_usize);
            for i in 0..n {
                v.push(read_bool(c, key, || {
                    format!("element {i} of array '{key}'")
                })?);
            }
            Array::Bool(v)
        }
        type_id::STRING => {
            let mut v = Vec::with_capacity(n_usize);
            for i in 0..n {
                v.push(c.string(|| format!("string {i} of array '{key}'"))?);
            }
            Array::String(v)
        }
        type_id::ARRAY => {
            let mut v = Vec::with_capacity(n_usize);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            Array::Array(v)
        }
        _ => unreachable!("min_encoded_size accepted only known types"),
    })
}

/// Reads the tensor table; offsets are returned relative to the data section.
fn read_tensor_infos(c: &mut Cursor<'_>, n_tensors: u64) -> Result<Vec<(TensorInfo, u64)>> {
    // n_tensors was checked against the remaining bytes.
    let mut out = Vec::with_capacity(n_tensors as usize);
    let mut seen = HashSet::new();
    for index in 0..n_tensors {
        let name = c.string(|| format!("name of tensor #{index}"))?;
        if !seen.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { name, index });
        }
        let n_dims = c.u32(|| format!("dimension count of tensor '{name}'"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims,
                max: MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for i in 0..n_dims {
            let d = c.u64(|| format!("dimension {i} of tensor '{name}'"))?;
            // ggml stores dims as i64, so larger values are negative there.
            if d == 0 || d > i64::MAX as u64 {
                return Err(GgufError::BadDim {
                    tensor: name,
                    index: i as usize,
                    value: d,
                });
            }
            dims.push(d);
        }
        let type_id = c.u32(|| format!("type of tensor '{name}'"))?;
        let rel_offset = c.u64(|| format!("data offset of tensor '{name}'"))?;

        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64);
        if n_elements.is_none() {
            return Err(GgufError::ElementCountOverflow { tensor: name, dims });
        }
        let Some(ty) = GgmlType::from_id(type_id) else {
            return Err(GgufError::UnknownTensorType {
                tensor: name,
                type_id,
            });
        };
        let Some(row_bytes) = ty.row_bytes(dims[0]) else {
            return Err(GgufError::RowNotBlockMultiple {
                tensor: name,
                ty,
                row_len: dims[0],
                block_size: ty.block_size() as u64,
            });
        };
        let n_rows: u64 = dims[1..].iter().product(); // divides n_elements: no overflow
        let n_bytes = row_bytes.checked_mul(n_rows);
        // Element and byte counts must also be addressable on this platform.
        let addressable = n_elements.is_some_and(|n| usize::try_from(n).is_ok())
            && n_bytes.is_some_and(|n| usize::try_from(n).is_ok());
        let Some(n_bytes) = n_bytes.filter(|_| addressable) else {
            return Err(GgufError::TensorTooLarge {
                tensor: name,
                ty,
                dims,
            });
        };
        out.push((
            TensorInfo {
                name,
                dims,
                ty,
                offset: 0,
                n_bytes,
            },
            rel_offset,
        ));
    }
    Ok(out)
}

/// Rejects tensors whose byte ranges overlap; a well-formed file lays them
/// out one after another, and aliased data means a corrupted table.
fn check_no_overlap(tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Bounds were checked, so offset + n_bytes does not overflow.
        let a_end = a.offset + a.n_bytes;
        if b.offset < a_end {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a_end,
                second: b.name.clone(),
                second_start: b.offset,
            });
        }
    }
    Ok(())
}
