//! Persistent context-binary cache, shared by the `qnnx` tool and the Python package.
//!
//! # Layout
//!
//! ```text
//! <dir>/<key[0..2]>/<key>.bin    the context binary, as QNN serialised it
//! <dir>/<key[0..2]>/<key>.json   EntryMeta: sizes, sha256 of the .bin, graphs and their I/O
//! <dir>/<key[0..2]>/<key>.lock   empty; advisory lock held while the entry is written or removed
//! ```
//!
//! Both files are written through a temporary sibling and a rename, the binary first and the
//! metadata last, so a `.json` marks a complete entry and a reader never sees a partial file.
//! They are not `fsync`ed: what a crash or power loss can leave (an empty, short or stale file)
//! fails the checks of every hit, and the entry is rebuilt.
//! Writers and removers hold the key's lock; readers take it only when an entry looks bad, to
//! tell a broken entry from one caught between its two renames.
//!
//! # Validation and its cost
//!
//! [`Cache::get`] re-hashes the whole binary on every hit and compares it with the sha256 in the
//! metadata. QNN's own check ([`qnn::binary_info`], then `contextCreateFromBinary`) does not
//! cover the weights: on the HTP emulator, flipping one byte at 39 offsets of a 53 kB
//! FullyConnected binary was rejected once, and 3 of the accepted binaries computed different
//! outputs without any error. A wrong answer is worse than a recompile.
//!
//! Measured on this project's 2-core x86_64 machine (SHA-NI, file in the page cache), a hit on a
//! 30 MB entry takes 25 ms (median of 11, about 1.2 GB/s) in a release build, against seconds to
//! minutes for a compile. An unoptimised debug build takes 0.9 s, since `sha2` is then built
//! without optimisation too. On a cold page cache the read dominates, but [`Entry::load`] reads
//! the same pages right after, so the extra cost is still the hashing alone.
//! `cargo test --release -p qnnx-engine --test cache -- --ignored hash_cost --nocapture` repeats the
//! measurement.
//!
//! # Last use and eviction
//!
//! The last-used time is the modification time of the `.json`: a hit sets it to now with one
//! `futimens`/`SetFileTime`, cheaper than rewriting the metadata and with no window in which a
//! concurrent writer's metadata could be overwritten by a stale copy. The `last_used_unix_ms`
//! field stored in the JSON is the time of the write; values returned by this module come from
//! the file time. On a read-only cache the touch fails silently and entries stay usable.
//!
//! With a budget, [`Cache::put`] evicts least-recently-used entries until the total size fits,
//! never the entry it has just written (so one entry larger than the budget is kept alone).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::private;

use qnn::{Backend, BinaryInfo, Context, DType, Device, GraphInfo, TensorInfo};
use qnnx_types::{parse_tensor_type, tensor_type_name};

/// Version of the metadata format ([`EntryMeta::format`]). An entry with another version is
/// treated as bad and replaced.
pub const FORMAT: u32 = 1;

/// Prefix of the key hash: names the key scheme, so a change of encoding changes every key.
const KEY_DOMAIN: &[u8] = b"qnnx-context-cache-key/1\0";

/// A cache operation on a file or folder failed. The message names the operation and the path;
/// callers that can carry on without the cache (compile again, do not store) show it as a
/// warning.
#[derive(Debug, thiserror::Error)]
#[error("context-binary cache: cannot {action} {}: {source}", path.display())]
pub struct CacheError {
    /// What was being done: `create directory`, `write`, `read`, `lock`, `remove`, ...
    pub action: &'static str,
    /// The file or folder concerned.
    pub path: PathBuf,
    /// The underlying error.
    pub source: io::Error,
}

impl CacheError {
    /// Whether the folder was refused because someone else owns it or could write it (the
    /// caller compiles without the cache, with this as its warning).
    pub fn is_untrusted(&self) -> bool {
        self.action == "trust"
    }

    pub(super) fn new<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(io::Error) -> CacheError + 'a {
        move |source| CacheError {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The default cache folder, or `None` when the environment names no home folder.
///
/// `$QNNX_CACHE_DIR` if set and non-empty; otherwise, on Linux and other Unix systems,
/// `$XDG_CACHE_HOME/qnnx` (when absolute, as the XDG spec requires) or `~/.cache/qnnx`; on
/// Windows `%LOCALAPPDATA%\qnnx\cache`; on macOS `~/Library/Caches/qnnx`.
pub fn default_dir() -> Option<PathBuf> {
    dir_for(std::env::consts::OS, |name| std::env::var_os(name))
}

fn dir_for(os: &str, var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("QNNX_CACHE_DIR") {
        return Some(dir);
    }
    match os {
        "windows" => var("LOCALAPPDATA").map(|d| d.join("qnnx").join("cache")),
        "macos" => var("HOME").map(|h| h.join("Library").join("Caches").join("qnnx")),
        _ => var("XDG_CACHE_HOME")
            .filter(|d| d.is_absolute())
            .map(|d| d.join("qnnx"))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("qnnx"))),
    }
}

/// The key of a cache entry: a sha256, as 64 lowercase hex digits. Built with
/// [`CacheKey::builder`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    /// Starts a key; see [`KeyBuilder`] for what goes in and how it is encoded.
    pub fn builder() -> KeyBuilder {
        KeyBuilder::default()
    }

    /// A key from its hex form (as printed by `Display` or listed by [`Cache::list`]); `None`
    /// unless it is 64 lowercase hex digits.
    pub fn parse(hex: &str) -> Option<CacheKey> {
        is_key(hex).then(|| CacheKey(hex.to_owned()))
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_key(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Collects everything a compiled context binary depends on and hashes it into a [`CacheKey`].
///
/// The hash is sha256 over, in this order (whatever order the setters were called in):
///
/// 1. the domain tag `qnnx-context-cache-key/1\0`;
/// 2. model: opt(bytes of sha256(model bytes));
/// 3. inputs: u64 count, then for each input in the order given: str(name), str(dtype),
///    u64 rank, rank × u64 dims;
/// 4. backend: opt(str);
/// 5. SoC model: opt(u64);
/// 6. HTP arch: opt(u64);
/// 7. QNN build id: opt(str);
/// 8. package version: str;
/// 9. settings: u64 count, then str(name), str(value) for each, sorted by name (bytewise).
///
/// where u64 is 8 bytes little-endian, str(s) and bytes(b) are a u64 length followed by the
/// bytes, and opt(x) is a 0 byte when unset or a 1 byte followed by x. Every variable-length
/// item carries its length, so no two different inputs encode to the same bytes (`("ab", "c")`
/// and `("a", "bc")` differ), and an unset field differs from an empty one.
///
/// Inputs keep their order because inputs bind by position. Setting a setting twice keeps the
/// last value. Unset fields are allowed (they hash as unset) but a caller should set them all.
#[derive(Debug, Clone)]
pub struct KeyBuilder {
    model: Option<[u8; 32]>,
    inputs: Vec<(String, String, Vec<u64>)>,
    backend: Option<String>,
    soc_model: Option<u32>,
    arch: Option<u32>,
    qnn_build_id: Option<String>,
    package_version: String,
    settings: BTreeMap<String, String>,
}

impl Default for KeyBuilder {
    fn default() -> KeyBuilder {
        KeyBuilder {
            model: None,
            inputs: Vec::new(),
            backend: None,
            soc_model: None,
            arch: None,
            qnn_build_id: None,
            package_version: env!("CARGO_PKG_VERSION").to_owned(),
            settings: BTreeMap::new(),
        }
    }
}

impl KeyBuilder {
    /// The model as compiled: the ONNX bytes with weights included. Hashed right away, so the
    /// builder does not keep a copy.
    pub fn model(mut self, bytes: &[u8]) -> Self {
        self.model = Some(Sha256::digest(bytes).into());
        self
    }

    /// Appends one model input: its name, dtype in the caller's spelling (only equality matters,
    /// so use one spelling consistently, such as ONNX's `float32`), and static shape.
    pub fn input(mut self, name: &str, dtype: &str, shape: &[u64]) -> Self {
        self.inputs
            .push((name.to_owned(), dtype.to_owned(), shape.to_vec()));
        self
    }

    /// The backend name, such as `htp`.
    pub fn backend(mut self, name: &str) -> Self {
        self.backend = Some(name.to_owned());
        self
    }

    /// The SoC the binary is prepared for (`Qnn_SocModel_t`, as in
    /// [`qnn::HtpDeviceConfig::soc_model`]).
    pub fn soc_model(mut self, soc: u32) -> Self {
        self.soc_model = Some(soc);
        self
    }

    /// The HTP architecture (73 for v73, as in [`qnn::HtpDeviceConfig::arch`]).
    pub fn arch(mut self, arch: u32) -> Self {
        self.arch = Some(arch);
        self
    }

    /// The QNN build id of the library that compiles ([`Backend::build_id`]).
    pub fn qnn_build_id(mut self, id: &str) -> Self {
        self.qnn_build_id = Some(id.to_owned());
        self
    }

    /// Our package version; defaults to this crate's version. The Python package passes its
    /// own, since its lowering glue changes with it.
    pub fn package_version(mut self, version: &str) -> Self {
        self.package_version = version.to_owned();
        self
    }

    /// A compile-relevant setting (precision, optimisation level, ...) by name and value.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Hashes the fields in the documented order.
    pub fn build(&self) -> CacheKey {
        let mut h = Sha256::new();
        h.update(KEY_DOMAIN);
        let u64_ = |h: &mut Sha256, v: u64| h.update(v.to_le_bytes());
        let bytes = |h: &mut Sha256, b: &[u8]| {
            u64_(h, b.len() as u64);
            h.update(b);
        };
        fn opt<T>(h: &mut Sha256, v: Option<T>, put: impl FnOnce(&mut Sha256, T)) {
            match v {
                None => h.update([0u8]),
                Some(v) => {
                    h.update([1u8]);
                    put(h, v);
                }
            }
        }
        opt(&mut h, self.model.as_ref(), |h, m| bytes(h, m));
        u64_(&mut h, self.inputs.len() as u64);
        for (name, dtype, dims) in &self.inputs {
            bytes(&mut h, name.as_bytes());
            bytes(&mut h, dtype.as_bytes());
            u64_(&mut h, dims.len() as u64);
            for &d in dims {
                u64_(&mut h, d);
            }
        }
        opt(&mut h, self.backend.as_deref(), |h, s| {
            bytes(h, s.as_bytes())
        });
        opt(&mut h, self.soc_model, |h, v| u64_(h, v.into()));
        opt(&mut h, self.arch, |h, v| u64_(h, v.into()));
        opt(&mut h, self.qnn_build_id.as_deref(), |h, s| {
            bytes(h, s.as_bytes())
        });
        bytes(&mut h, self.package_version.as_bytes());
        u64_(&mut h, self.settings.len() as u64);
        for (name, value) in &self.settings {
            bytes(&mut h, name.as_bytes());
            bytes(&mut h, value.as_bytes());
        }
        CacheKey(hex(&h.finalize()))
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// One tensor of a cached graph, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMeta {
    /// The tensor name in the graph.
    pub name: String,
    /// The element type: `f32`, `f16`, `i8`, `u8`, `i16`, `u16`, `i32`, `u32`, `i64`, `u64`,
    /// `bool`, `qu8`, `qi8`, `qu16`, `qi16` or `qi32` (see [`TensorMeta::data_type`]).
    pub dtype: String,
    /// The shape.
    pub dims: Vec<u32>,
}

impl TensorMeta {
    /// The element type and whether the tensor is quantized, if this build knows the name.
    pub fn data_type(&self) -> Option<(DType, bool)> {
        parse_tensor_type(&self.dtype)
    }
}

impl From<&TensorInfo> for TensorMeta {
    fn from(t: &TensorInfo) -> TensorMeta {
        TensorMeta {
            name: t.name.clone(),
            dtype: tensor_type_name(t.dtype, t.quantization.is_quantized()),
            dims: t.dims.clone(),
        }
    }
}

/// One graph of a cached context binary, as plain data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphMeta {
    /// The graph name, for [`Context::graph`].
    pub name: String,
    /// Inputs in binding order.
    pub inputs: Vec<TensorMeta>,
    /// Outputs in binding order.
    pub outputs: Vec<TensorMeta>,
}

impl From<&GraphInfo> for GraphMeta {
    fn from(g: &GraphInfo) -> GraphMeta {
        GraphMeta {
            name: g.name.clone(),
            inputs: g.inputs.iter().map(TensorMeta::from).collect(),
            outputs: g.outputs.iter().map(TensorMeta::from).collect(),
        }
    }
}

/// What the caller records with a new entry; [`Cache::put`] adds the key, times, size and hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewEntry {
    /// Backend name, such as `htp`.
    pub backend: String,
    /// QNN build id of the library that produced the binary.
    pub qnn_build_id: String,
    /// The SoC the binary was prepared for.
    pub soc_model: Option<u32>,
    /// The graphs of the binary with their I/O.
    pub graphs: Vec<GraphMeta>,
    /// Free-form caller data (the Python side stores its FX fingerprint here).
    pub extra: BTreeMap<String, String>,
}

impl NewEntry {
    /// Build id, SoC and graphs from the binary's own description ([`qnn::binary_info`]).
    pub fn from_binary_info(backend: &str, info: &BinaryInfo) -> NewEntry {
        NewEntry {
            backend: backend.to_owned(),
            qnn_build_id: info.build_id.clone(),
            soc_model: info.soc_model,
            graphs: info.graphs.iter().map(GraphMeta::from).collect(),
            extra: BTreeMap::new(),
        }
    }
}

/// The contents of `<key>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    /// [`FORMAT`] of the writer.
    pub format: u32,
    /// The entry's key, in hex; must match the file name.
    pub key: String,
    /// When the entry was written, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// When the entry was last returned by [`Cache::get`] (from the metadata's file time; see
    /// the module docs).
    pub last_used_unix_ms: u64,
    /// Size of the `.bin` in bytes.
    pub size: u64,
    /// sha256 of the `.bin`, hex; checked on every [`Cache::get`].
    pub sha256: String,
    /// QNN build id of the library that produced the binary.
    pub qnn_build_id: String,
    /// The SoC the binary was prepared for.
    pub soc_model: Option<u32>,
    /// Backend name, such as `htp`.
    pub backend: String,
    /// The graphs of the binary with their I/O.
    pub graphs: Vec<GraphMeta>,
    /// Free-form caller data.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

impl EntryMeta {
    /// Parses the text of a `.json` and checks what can be checked without the binary: this
    /// [`FORMAT`] and the entry's `key`. `Err` says what is wrong. The text is a file in the
    /// cache folder, so nothing about it is trusted; `scripts/fuzz` runs it on arbitrary bytes.
    pub fn parse(text: &[u8], key: &CacheKey) -> Result<EntryMeta, String> {
        let meta: EntryMeta =
            serde_json::from_slice(text).map_err(|e| format!("metadata does not parse: {e}"))?;
        if meta.format != FORMAT {
            return Err(format!(
                "metadata format {} (this build reads {FORMAT})",
                meta.format
            ));
        }
        if meta.key != key.as_str() {
            return Err(format!("metadata is for another key ({})", meta.key));
        }
        Ok(meta)
    }
}

/// A valid cache entry, returned by [`Cache::get`] and [`Cache::put`].
#[derive(Debug, Clone)]
pub struct Entry {
    meta: EntryMeta,
    path: PathBuf,
}

impl Entry {
    /// The entry's metadata.
    pub fn meta(&self) -> &EntryMeta {
        &self.meta
    }

    /// The path of the `.bin`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Memory-maps the binary and creates a context from it ([`Context::from_file_expecting`]):
    /// the binary info is read through QnnSystem first and must say what the entry's key says,
    /// that the binary was made by `backend`'s QNN build for the SoC `backend` is configured
    /// for. [`Cache::get`] has checked the sha256 against the metadata, but metadata and binary
    /// could have been planted together. If a check or QNN rejects the binary, call
    /// [`Cache::invalidate`] and compile again.
    pub fn load(&self, backend: &Backend, device: Option<&Device>) -> qnn::Result<Context> {
        let expected = qnn::ExpectedBinary {
            soc_model: match backend.config() {
                qnn::BackendConfig::Htp(c) => c.device.soc_model,
                qnn::BackendConfig::Gpu(_) | qnn::BackendConfig::Cpu => None,
            },
            build_id: Some(backend.build_id()?),
        };
        Context::from_file_expecting(backend, device, &self.path, &expected)
    }
}

/// One key's files in the cache folder, as listed by [`Cache::list`] or removed by
/// [`Cache::prune`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySummary {
    /// The key, in hex.
    pub key: String,
    /// Bytes of all the key's files (binary, metadata, and any lock or temporary file).
    pub bytes: u64,
    /// The metadata's file time (or the newest file's, without metadata), in milliseconds since
    /// the Unix epoch.
    pub last_used_unix_ms: u64,
    /// The metadata, when it exists and parses; `None` for an entry being written or a broken
    /// one (which [`Cache::get`] removes). It is not checked against the binary here.
    pub meta: Option<EntryMeta>,
}

/// A context-binary cache in one folder. Cheap to clone; any number of `Cache` values, threads
/// and processes may use the same folder at once.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    budget: Option<u64>,
}

enum Check {
    Valid(EntryMeta),
    Absent,
    Bad(String),
}

impl Cache {
    /// Opens (creating if needed) the cache in `dir`. With `budget_bytes`, [`Cache::put`] keeps
    /// the folder's total size within it by evicting least-recently-used entries; `None` means
    /// no limit.
    ///
    /// An existing read-only folder opens fine: hits work and [`Cache::put`] fails.
    pub fn open(dir: impl Into<PathBuf>, budget_bytes: Option<u64>) -> Result<Cache, CacheError> {
        let dir = dir.into();
        private::create_dir(&dir).map_err(CacheError::new("create directory", &dir))?;
        if let Some(why) = private::problem(&dir) {
            return Err(private::refused(&dir, why));
        }
        private::tighten(&dir);
        Ok(Cache {
            dir,
            budget: budget_bytes,
        })
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size budget given to [`Cache::open`].
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    fn shard(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2])
    }

    fn file(&self, key: &str, ext: &str) -> PathBuf {
        self.shard(key).join(format!("{key}.{ext}"))
    }

    /// Where the key's binary lives (whether or not it exists).
    pub fn bin_path(&self, key: &CacheKey) -> PathBuf {
        self.file(key.as_str(), "bin")
    }

    /// Where the key's metadata lives (whether or not it exists).
    pub fn meta_path(&self, key: &CacheKey) -> PathBuf {
        self.file(key.as_str(), "json")
    }

    /// The valid entry for `key`, or `None`.
    ///
    /// Checks that the metadata parses, has this format and key, and that the binary exists, is
    /// not empty, has the recorded size and sha256. An entry failing any check is removed and
    /// reported as a miss with one `warn` line naming the problem. A hit marks the entry used.
    ///
    /// Errors only when a file cannot be read for a reason other than its absence (such as
    /// permissions); callers can treat that as a miss.
    pub fn get(&self, key: &CacheKey) -> Result<Option<Entry>, CacheError> {
        // An entry someone else could have written is never used (nor removed: it may not be
        // ours to remove).
        let files = [
            self.shard(key.as_str()),
            self.meta_path(key),
            self.bin_path(key),
        ];
        if let Some(why) = files.iter().find_map(|p| private::problem(p)) {
            tracing::warn!("context-binary cache: not using entry {key}: {why}");
            return Ok(None);
        }
        let problem = match self.check(key)? {
            Check::Valid(meta) => return Ok(Some(self.hit(key, meta))),
            Check::Absent => return Ok(None),
            Check::Bad(problem) => problem,
        };
        // Without the lock the metadata may have been read just before a writer replaced the
        // binary; under the lock the entry is either complete or absent.
        let lock = match self.lock(key.as_str(), true) {
            Ok(lock) => lock,
            Err(e) => {
                tracing::warn!(
                    "context-binary cache: ignoring entry {key}: {problem} (cannot remove it: {e})"
                );
                return Ok(None);
            }
        };
        match self.check(key)? {
            Check::Valid(meta) => Ok(Some(self.hit(key, meta))),
            Check::Absent => Ok(None),
            Check::Bad(problem) => {
                let removed = self.remove_entry(key.as_str(), &lock);
                drop(lock);
                match removed {
                    Ok(()) => tracing::warn!(
                        "context-binary cache: removed entry {key} ({}): {problem}",
                        self.shard(key.as_str()).display()
                    ),
                    Err(e) => tracing::warn!(
                        "context-binary cache: ignoring entry {key}: {problem} ({e})"
                    ),
                }
                Ok(None)
            }
        }
    }

    fn check(&self, key: &CacheKey) -> Result<Check, CacheError> {
        let meta_path = self.meta_path(key);
        let text = match fs::read(&meta_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Check::Absent),
            Err(e) => return Err(CacheError::new("read", &meta_path)(e)),
        };
        let meta = match EntryMeta::parse(&text, key) {
            Ok(m) => m,
            Err(problem) => return Ok(Check::Bad(problem)),
        };
        let bin_path = self.bin_path(key);
        let mut file = match File::open(&bin_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Check::Bad("binary is missing".into()))
            }
            Err(e) => return Err(CacheError::new("read", &bin_path)(e)),
        };
        let len = file
            .metadata()
            .map_err(CacheError::new("read", &bin_path))?
            .len();
        if len == 0 {
            return Ok(Check::Bad("binary is empty".into()));
        }
        if len != meta.size {
            return Ok(Check::Bad(format!(
                "binary is {len} bytes, metadata says {}",
                meta.size
            )));
        }
        let sha = hash_reader(&mut file).map_err(CacheError::new("read", &bin_path))?;
        if sha != meta.sha256 {
            return Ok(Check::Bad(format!(
                "binary sha256 is {sha}, metadata says {}",
                meta.sha256
            )));
        }
        Ok(Check::Valid(meta))
    }

    fn hit(&self, key: &CacheKey, mut meta: EntryMeta) -> Entry {
        let meta_path = self.meta_path(key);
        for p in [
            self.shard(key.as_str()),
            self.bin_path(key),
            meta_path.clone(),
        ] {
            private::tighten(&p);
        }
        let now = SystemTime::now();
        // Opening for writing does not change the contents; Windows needs write access to set
        // file times.
        let touched = OpenOptions::new()
            .write(true)
            .open(&meta_path)
            .and_then(|f| f.set_modified(now));
        if let Err(e) = touched {
            tracing::debug!(
                "context-binary cache: cannot mark {} used: {e}",
                meta_path.display()
            );
        }
        meta.last_used_unix_ms = unix_ms(now);
        Entry {
            meta,
            path: self.bin_path(key),
        }
    }

    /// Stores `binary` under `key`, replacing any entry there, and returns the new entry.
    ///
    /// Holds the key's lock while writing, so concurrent writers of one key take turns and
    /// the entry left is one writer's complete binary and metadata. Then, with a budget, evicts
    /// least-recently-used entries (never this one) until the cache fits; eviction problems are
    /// logged, not returned.
    ///
    /// Fails with a [`CacheError`] naming the path when the folder cannot be written (read-only,
    /// full, or not a folder), or when `binary` is empty.
    pub fn put(&self, key: &CacheKey, binary: &[u8], meta: NewEntry) -> Result<Entry, CacheError> {
        let k = key.as_str();
        let bin_path = self.bin_path(key);
        let meta_path = self.meta_path(key);
        if binary.is_empty() {
            return Err(CacheError::new("store", &bin_path)(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the context binary is empty",
            )));
        }
        let shard = self.shard(k);
        private::create_dir(&shard).map_err(CacheError::new("create directory", &shard))?;
        if let Some(why) = private::problem(&shard) {
            return Err(private::refused(&shard, why));
        }
        let lock = self.lock(k, true)?;
        // Writers only write under the lock, so any temporary file of this key now is left over
        // from a writer that died.
        self.remove_temps(k);
        // The hash runs on a second thread while the binary is written (about 20 ms each for
        // resnet18's 24 MB).
        let (sha256, written) = std::thread::scope(|s| {
            let hash = s.spawn(|| hex(&Sha256::digest(binary)));
            let written = write_replacing(&bin_path, binary);
            (hash.join().expect("hashing does not panic"), written)
        });
        written.map_err(CacheError::new("write", &bin_path))?;
        let now = unix_ms(SystemTime::now());
        let meta = EntryMeta {
            format: FORMAT,
            key: k.to_owned(),
            created_unix_ms: now,
            last_used_unix_ms: now,
            size: binary.len() as u64,
            sha256,
            qnn_build_id: meta.qnn_build_id,
            soc_model: meta.soc_model,
            backend: meta.backend,
            graphs: meta.graphs,
            extra: meta.extra,
        };
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| CacheError::new("serialise", &meta_path)(e.into()))?;
        if let Err(e) = write_replacing(&meta_path, &json) {
            // An old .json would now describe the new binary wrongly; drop both.
            let _ = self.remove_entry(k, &lock);
            return Err(CacheError::new("write", &meta_path)(e));
        }
        drop(lock);
        if let Some(budget) = self.budget {
            if let Err(e) = self.prune_keeping(budget, Some(k)) {
                tracing::warn!("context-binary cache: eviction failed: {e}");
            }
        }
        Ok(Entry {
            meta,
            path: bin_path,
        })
    }

    /// Removes the entry for `key` (for example after QNN rejected its binary). Returns whether
    /// there was anything to remove.
    pub fn invalidate(&self, key: &CacheKey) -> Result<bool, CacheError> {
        let k = key.as_str();
        if !self.shard(k).is_dir() {
            return Ok(false);
        }
        let lock = self.lock(k, true)?;
        let existed = self.meta_path(key).exists() || self.bin_path(key).exists();
        self.remove_entry(k, &lock)?;
        Ok(existed)
    }

    /// Every key with files in the cache, least recently used first. Reads metadata only; does
    /// not hash binaries.
    pub fn list(&self) -> Result<Vec<EntrySummary>, CacheError> {
        let mut out: Vec<EntrySummary> = self
            .scan()?
            .into_iter()
            .filter(|s| s.has_bin || s.has_meta)
            .map(|s| self.summary(&s))
            .collect();
        out.sort_by(|a, b| (a.last_used_unix_ms, &a.key).cmp(&(b.last_used_unix_ms, &b.key)));
        Ok(out)
    }

    /// Bytes of all the cache's files (binaries, metadata, locks, temporaries).
    pub fn total_size(&self) -> Result<u64, CacheError> {
        Ok(self.scan()?.iter().map(|s| s.bytes).sum())
    }

    /// Evicts least-recently-used entries until the cache takes at most `max_bytes`, and
    /// removes files left by writers that died. Entries being written at the time are skipped.
    /// Returns what was removed, oldest first.
    pub fn prune(&self, max_bytes: u64) -> Result<Vec<EntrySummary>, CacheError> {
        self.prune_keeping(max_bytes, None)
    }

    /// Removes every entry (except any being written at the time). Only files named like
    /// cache files are touched, so pointing a cache at the wrong folder loses nothing else.
    pub fn clear(&self) -> Result<(), CacheError> {
        self.prune(0).map(drop)
    }

    fn prune_keeping(
        &self,
        max_bytes: u64,
        keep: Option<&str>,
    ) -> Result<Vec<EntrySummary>, CacheError> {
        let mut scanned = self.scan()?;
        let mut total: u64 = scanned.iter().map(|s| s.bytes).sum();
        // Leftovers (no metadata) go first whatever their age: nothing can ever hit them.
        scanned.sort_by_key(|s| (s.has_meta, s.last_used_ms));
        let mut removed = Vec::new();
        for s in &scanned {
            let leftover = !s.has_meta;
            if (!leftover && total <= max_bytes) || keep == Some(s.key.as_str()) {
                continue;
            }
            // A busy lock means a writer is at work on this key: leave it alone.
            let Some(lock) = self.try_lock(&s.key)? else {
                continue;
            };
            // A writer may have finished this key between the scan and the lock.
            let Some(s) = self
                .scan_key(&s.key)?
                .filter(|now| now.has_meta == s.has_meta)
            else {
                continue;
            };
            let s = &s;
            let summary = self.summary(s);
            if let Err(e) = self.remove_files(s, &lock) {
                tracing::warn!("context-binary cache: eviction of {}: {e}", s.key);
                continue;
            }
            total = total.saturating_sub(s.bytes);
            if s.has_bin || s.has_meta {
                removed.push(summary);
            }
        }
        Ok(removed)
    }

    fn summary(&self, s: &Scanned) -> EntrySummary {
        let meta = s
            .has_meta
            .then(|| fs::read(self.file(&s.key, "json")).ok())
            .flatten()
            .and_then(|t| serde_json::from_slice::<EntryMeta>(&t).ok())
            .filter(|m| m.key == s.key)
            .map(|mut m| {
                m.last_used_unix_ms = s.last_used_ms;
                m
            });
        EntrySummary {
            key: s.key.clone(),
            bytes: s.bytes,
            last_used_unix_ms: s.last_used_ms,
            meta,
        }
    }

    fn scan(&self) -> Result<Vec<Scanned>, CacheError> {
        let mut by_key: BTreeMap<String, Scanned> = BTreeMap::new();
        let shards = match fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::new("read directory", &self.dir)(e)),
        };
        for shard in shards {
            let shard = shard.map_err(CacheError::new("read directory", &self.dir))?;
            let name = shard.file_name();
            match name.to_str() {
                Some(name) if name.len() == 2 && shard.path().is_dir() => {
                    scan_shard(&shard.path(), name, None, &mut by_key)?
                }
                _ => {}
            }
        }
        Ok(by_key.into_values().collect())
    }

    fn scan_key(&self, key: &str) -> Result<Option<Scanned>, CacheError> {
        let mut by_key = BTreeMap::new();
        scan_shard(&self.shard(key), &key[..2], Some(key), &mut by_key)?;
        Ok(by_key.remove(key))
    }

    fn remove_files(&self, s: &Scanned, lock: &KeyLock) -> Result<(), CacheError> {
        // Metadata first: without it the rest is an incomplete entry, never a hit.
        let mut files: Vec<&(FileKind, PathBuf)> = s.files.iter().collect();
        files.sort_by_key(|(kind, _)| *kind != FileKind::Meta);
        for (_, path) in files {
            remove_if_exists(path)?;
        }
        lock.remove();
        Ok(())
    }

    fn remove_entry(&self, key: &str, lock: &KeyLock) -> Result<(), CacheError> {
        remove_if_exists(&self.file(key, "json"))?;
        remove_if_exists(&self.file(key, "bin"))?;
        self.remove_temps(key);
        lock.remove();
        Ok(())
    }

    fn remove_temps(&self, key: &str) {
        let Ok(files) = fs::read_dir(self.shard(key)) else {
            return;
        };
        for file in files.flatten() {
            let name = file.file_name();
            if let Some((k, FileKind::Temp)) = name.to_str().and_then(classify) {
                if k == key {
                    let _ = fs::remove_file(file.path());
                }
            }
        }
    }

    fn lock(&self, key: &str, blocking: bool) -> Result<KeyLock, CacheError> {
        self.lock_inner(key, blocking)?.ok_or_else(|| {
            CacheError::new("lock", &self.file(key, "lock"))(io::ErrorKind::WouldBlock.into())
        })
    }

    fn try_lock(&self, key: &str) -> Result<Option<KeyLock>, CacheError> {
        self.lock_inner(key, false)
    }

    fn lock_inner(&self, key: &str, blocking: bool) -> Result<Option<KeyLock>, CacheError> {
        let path = self.file(key, "lock");
        loop {
            let file = private::file_options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(CacheError::new("lock", &path))?;
            // Called through the trait: `File::lock` (Rust 1.89) would shadow it and is newer
            // than the workspace's rust-version.
            if blocking {
                fs4::FileExt::lock(&file).map_err(CacheError::new("lock", &path))?;
            } else {
                match fs4::FileExt::try_lock(&file) {
                    Ok(()) => {}
                    Err(fs4::TryLockError::WouldBlock) => return Ok(None),
                    Err(fs4::TryLockError::Error(e)) => {
                        return Err(CacheError::new("lock", &path)(e))
                    }
                }
            }
            // A remover may have deleted the lock file while we waited for it; the lock we got
            // is then on an orphaned inode, and a newcomer may be holding the new file's lock.
            if lock_file_is_current(&file, &path) {
                return Ok(Some(KeyLock { _file: file, path }));
            }
        }
    }
}

fn scan_shard(
    shard: &Path,
    shard_name: &str,
    only: Option<&str>,
    by_key: &mut BTreeMap<String, Scanned>,
) -> Result<(), CacheError> {
    let files = match fs::read_dir(shard) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CacheError::new("read directory", shard)(e)),
    };
    for file in files {
        let Ok(file) = file else { continue };
        let name = file.file_name();
        let Some((key, kind)) = name.to_str().and_then(classify) else {
            continue;
        };
        if !key.starts_with(shard_name) || only.is_some_and(|k| k != key) {
            continue;
        }
        // Files can vanish under a concurrent remover between listing and stat.
        let Ok(md) = file.metadata() else { continue };
        let mtime = md.modified().map(unix_ms).unwrap_or(0);
        let s = by_key.entry(key.to_owned()).or_insert_with(|| Scanned {
            key: key.to_owned(),
            bytes: 0,
            last_used_ms: 0,
            has_meta: false,
            has_bin: false,
            files: Vec::new(),
        });
        s.bytes += md.len();
        match kind {
            FileKind::Meta => {
                s.has_meta = true;
                s.last_used_ms = mtime;
            }
            _ if !s.has_meta => s.last_used_ms = s.last_used_ms.max(mtime),
            _ => {}
        }
        s.has_bin |= kind == FileKind::Bin;
        if kind != FileKind::Lock {
            s.files.push((kind, file.path()));
        }
    }
    Ok(())
}

/// Writes `bytes` to a temporary file beside `path` (named like those of [`qnn::write_atomic`], which
/// [`Cache::put`] and the scans recognise) and renames it over `path`: readers see the old file
/// or the new one, never a partial one. Unlike [`qnn::write_atomic`] it does not `fsync` (16 to 26 ms
/// for a 24 MB binary here, more on Windows): a file torn by a crash or power loss has the wrong
/// size or sha256 or metadata that does not parse, which [`Cache::get`] checks on every hit.
pub(super) fn write_replacing(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = private::file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| io::Write::write_all(&mut f, bytes))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn remove_if_exists(path: &Path) -> Result<(), CacheError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(CacheError::new("remove", path)(e)),
        _ => Ok(()),
    }
}

fn hash_reader(r: &mut impl Read) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(hex(&h.finalize())),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An exclusive advisory lock on `<key>.lock`, released when dropped (the file is closed).
struct KeyLock {
    _file: File,
    path: PathBuf,
}

impl KeyLock {
    /// Deletes the lock file while holding it, so evicted keys leave nothing behind. Only on
    /// Unix, where [`lock_file_is_current`] lets waiters notice; elsewhere lock files stay.
    fn remove(&self) {
        if cfg!(unix) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(unix)]
fn lock_file_is_current(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn lock_file_is_current(_file: &File, _path: &Path) -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Bin,
    Meta,
    Lock,
    /// `.<key>.bin.<pid>.tmp` or `.<key>.json.<pid>.tmp`, from [`write_replacing`].
    Temp,
}

fn classify(name: &str) -> Option<(&str, FileKind)> {
    if let Some(rest) = name.strip_prefix('.') {
        let key = rest.get(..64).filter(|k| is_key(k))?;
        let tail = &rest[64..];
        let ok =
            (tail.starts_with(".bin.") || tail.starts_with(".json.")) && tail.ends_with(".tmp");
        return ok.then_some((key, FileKind::Temp));
    }
    let (key, ext) = name.split_once('.')?;
    if !is_key(key) {
        return None;
    }
    let kind = match ext {
        "bin" => FileKind::Bin,
        "json" => FileKind::Meta,
        "lock" => FileKind::Lock,
        _ => return None,
    };
    Some((key, kind))
}

struct Scanned {
    key: String,
    bytes: u64,
    last_used_ms: u64,
    has_meta: bool,
    has_bin: bool,
    files: Vec<(FileKind, PathBuf)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn default_dir_follows_platform_conventions() {
        let home = [("HOME", "/home/u")];
        assert_eq!(
            dir_for("linux", env(&home)),
            Some(PathBuf::from("/home/u/.cache/qnnx"))
        );
        let xdg = [("HOME", "/home/u"), ("XDG_CACHE_HOME", "/xdg")];
        assert_eq!(
            dir_for("linux", env(&xdg)),
            Some(PathBuf::from("/xdg/qnnx"))
        );
        let relative_xdg = [("HOME", "/home/u"), ("XDG_CACHE_HOME", "rel")];
        assert_eq!(
            dir_for("linux", env(&relative_xdg)),
            Some(PathBuf::from("/home/u/.cache/qnnx"))
        );
        assert_eq!(
            dir_for("macos", env(&home)),
            Some(PathBuf::from("/home/u/Library/Caches/qnnx"))
        );
        let win = [("LOCALAPPDATA", "/appdata")];
        assert_eq!(
            dir_for("windows", env(&win)),
            Some(PathBuf::from("/appdata").join("qnnx").join("cache"))
        );
        let over = [("HOME", "/home/u"), ("QNNX_CACHE_DIR", "/mine")];
        for os in ["linux", "macos", "windows"] {
            assert_eq!(dir_for(os, env(&over)), Some(PathBuf::from("/mine")));
        }
        let empty_override = [("HOME", "/home/u"), ("QNNX_CACHE_DIR", "")];
        assert_eq!(
            dir_for("linux", env(&empty_override)),
            Some(PathBuf::from("/home/u/.cache/qnnx"))
        );
        assert_eq!(dir_for("linux", env(&[])), None);
        assert_eq!(dir_for("windows", env(&home)), None);
    }

    #[test]
    fn file_names_are_classified_strictly() {
        let k = "ab".repeat(32);
        assert_eq!(
            classify(&format!("{k}.bin")),
            Some((k.as_str(), FileKind::Bin))
        );
        assert_eq!(
            classify(&format!("{k}.json")),
            Some((k.as_str(), FileKind::Meta))
        );
        assert_eq!(
            classify(&format!("{k}.lock")),
            Some((k.as_str(), FileKind::Lock))
        );
        assert_eq!(
            classify(&format!(".{k}.bin.123.tmp")),
            Some((k.as_str(), FileKind::Temp))
        );
        assert_eq!(classify(&format!("{k}.txt")), None);
        assert_eq!(classify(&format!("{}.bin", k.to_uppercase())), None);
        assert_eq!(classify("notes.bin"), None);
        assert_eq!(classify(&format!(".{k}.other.tmp")), None);
    }

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            for q in [false, true] {
                let t = TensorMeta {
                    name: String::new(),
                    dtype: tensor_type_name(d, q),
                    dims: vec![],
                };
                assert_eq!(t.data_type(), Some((d, q)));
            }
        }
    }
}
