//! The bodies of the engine's fuzz targets: everything the engine parses itself from files in
//! the cache folder, which it must not trust. Compiled into each target (`fuzz_targets/*.rs`)
//! and into `engine/tests/fuzz_regressions.rs`, which replays `regressions/` through the same
//! code. Each function takes the fuzzer's bytes and panics only on a broken property.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use qnnx_engine::cache::{
    parse_alias, parse_split_alias, Cache, CacheKey, EntryMeta, NewEntry, FORMAT,
};
use qnnx_engine::io::{parse_io_binding, IoBinding};
use qnnx_types::DType;
use sha2::{Digest, Sha256};

/// The key every target's entries live under.
fn key() -> &'static CacheKey {
    static KEY: OnceLock<CacheKey> = OnceLock::new();
    KEY.get_or_init(|| CacheKey::builder().model(b"fuzz").build())
}

/// The fingerprint of the alias `cache_alias` rewrites.
const FINGERPRINT: &str = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0";

fn cache_dir(target: &str) -> PathBuf {
    std::env::temp_dir().join(format!("qnnx-fuzz-{target}-{}", std::process::id()))
}

/// Removes this process's cache folders (`scripts/fuzz` removes those of fuzzing runs, which
/// end without cleaning up).
pub fn remove_cache_dirs() {
    for target in ["cache_get", "cache_alias"] {
        let _ = std::fs::remove_dir_all(cache_dir(target));
    }
}

/// A fresh cache folder per process and target, under `$TMPDIR` (`scripts/fuzz` points it at
/// a RAM disk when there is one), with the key's shard made by the cache itself.
fn cache(target: &str) -> Cache {
    let dir = cache_dir(target);
    let _ = std::fs::remove_dir_all(&dir);
    let cache = Cache::open(&dir, None).expect("a cache in the temporary folder");
    cache
        .put(key(), b"seed", NewEntry::default())
        .expect("a first entry");
    cache.put_alias(FINGERPRINT, key()).expect("a first alias");
    cache
}

/// `data` split at its first NUL (which JSON text cannot contain): (before, after).
fn split_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn touch_every_dtype_name(meta: &EntryMeta) {
    for g in &meta.graphs {
        for t in g.inputs.iter().chain(&g.outputs) {
            let _ = t.data_type();
        }
    }
}

/// Metadata text: parses (with this format and key) or says why not; what parses serialises
/// back to the same metadata.
pub fn cache_meta(data: &[u8]) {
    let Ok(meta) = EntryMeta::parse(data, key()) else {
        return;
    };
    touch_every_dtype_name(&meta);
    let text = serde_json::to_vec(&meta).expect("metadata serialises");
    let again = EntryMeta::parse(&text, key()).expect("serialised metadata parses");
    assert_eq!(again, meta);
}

/// First byte: flags (bit 0: make the metadata agree with the binary where it is a JSON
/// object, so hits are reachable; bit 1: no binary file; bit 2: list the cache too). The rest,
/// split at the first NUL: the `.json`, then the `.bin`.
pub fn cache_get(data: &[u8]) {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| cache("cache_get"));
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (json, bin) = split_nul(rest);
    let mut json = json.to_vec();
    if flags & 1 != 0 {
        if let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(&json) {
            m.insert("format".into(), FORMAT.into());
            m.insert("key".into(), key().as_str().into());
            m.insert("size".into(), (bin.len() as u64).into());
            m.insert("sha256".into(), sha256_hex(bin).into());
            json = serde_json::to_vec(&m).expect("a JSON object serialises");
        }
    }
    let (meta_path, bin_path) = (cache.meta_path(key()), cache.bin_path(key()));
    std::fs::write(&bin_path, bin).expect("write the binary");
    if flags & 2 != 0 {
        std::fs::remove_file(&bin_path).expect("remove the binary");
    }
    std::fs::write(&meta_path, &json).expect("write the metadata");
    match cache.get(key()).expect("the files are readable") {
        Some(entry) => {
            let m = entry.meta();
            assert_eq!(m.key, key().as_str());
            assert_eq!(m.format, FORMAT);
            let on_disk = std::fs::read(entry.path()).expect("a hit's binary exists");
            assert!(!on_disk.is_empty(), "a hit with an empty binary");
            assert_eq!(on_disk.len() as u64, m.size);
            assert_eq!(sha256_hex(&on_disk), m.sha256);
            touch_every_dtype_name(m);
        }
        None => {
            // A bad entry is removed, so the next compile replaces it.
            assert!(!meta_path.exists(), "a bad entry's metadata was left");
            assert!(!bin_path.exists(), "a bad entry's binary was left");
        }
    }
    if flags & 4 != 0 {
        let listed = cache.list().expect("list");
        assert!(listed.len() <= 1, "{listed:?}");
        let _ = cache.total_size();
    }
}

/// Before the first NUL: a fingerprint as a caller might pass it; after: an alias file's bytes.
pub fn cache_alias(data: &[u8]) {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| cache("cache_alias"));
    let (fingerprint, text) = split_nul(data);
    if let Ok(fp) = std::str::from_utf8(fingerprint) {
        if let Some(path) = cache.alias_path(fp) {
            assert_eq!(
                path.parent(),
                Some(cache.dir().join("fx").as_path()),
                "{fp:?}"
            );
            assert_eq!(
                path.file_name().and_then(|n| n.to_str()),
                Some(format!("{fp}.key").as_str())
            );
        }
    }
    let parsed = parse_alias(text);
    if let Some(k) = &parsed {
        assert_eq!(CacheKey::parse(k.as_str()).as_ref(), Some(k));
    }
    let path = cache.alias_path(FINGERPRINT).expect("a valid fingerprint");
    std::fs::write(&path, text).expect("write the alias");
    assert_eq!(cache.get_alias(FINGERPRINT), parsed);
    // The alias stays only if it names an entry that exists (the shard's first entry does).
    cache.remove_dangling_aliases();
    let live = parsed.is_some_and(|k| cache.meta_path(&k).exists());
    assert_eq!(path.exists(), live);
    // The same bytes as a split alias (JSON: a key and a plan).
    let split = parse_split_alias(text);
    if let Some((k, _)) = &split {
        assert_eq!(CacheKey::parse(k.as_str()).as_ref(), Some(k));
    }
    let dir = cache.dir().join("fx");
    std::fs::create_dir_all(&dir).expect("the alias folder");
    let path = dir.join(format!("{FINGERPRINT}.split.json"));
    std::fs::write(&path, text).expect("write the split alias");
    assert_eq!(cache.get_split_alias(FINGERPRINT), split);
    cache.remove_dangling_aliases();
    let live = split.is_some_and(|(k, _)| cache.meta_path(&k).exists());
    assert_eq!(path.exists(), live);
}

/// The graph tensors a binding describes, if its slots number them 0..n once each: each
/// tensor of the dtype its model tensor binds as (int64 narrowed to int32).
fn described(b: &IoBinding) -> Option<(Vec<DType>, Vec<DType>)> {
    fn side(dtypes: impl Iterator<Item = DType>, slots: &[usize]) -> Option<Vec<DType>> {
        let mut t = vec![None; slots.len()];
        for (d, &s) in dtypes.zip(slots) {
            let cell = t.get_mut(s)?;
            if cell.is_some() {
                return None;
            }
            *cell = Some(match d {
                DType::I64 => DType::I32,
                d => d,
            });
        }
        t.into_iter().collect()
    }
    Some((
        side(b.inputs.iter().map(|io| io.host_dtype), &b.input_slots)?,
        side(b.outputs.iter().map(|io| io.host_dtype), &b.output_slots)?,
    ))
}

/// I/O binding text: what parses fits the graph it describes, and no graph when its slots do
/// not number the graph's tensors once each.
pub fn io_binding(data: &[u8]) {
    let Some(b) = std::str::from_utf8(data).ok().and_then(parse_io_binding) else {
        return;
    };
    assert_eq!(b.inputs.len(), b.input_slots.len());
    assert_eq!(b.outputs.len(), b.output_slots.len());
    match described(&b) {
        Some((ins, outs)) => assert!(b.fits(&ins, &outs), "{b:?}"),
        None => {
            let any = |n: usize| vec![DType::F32; n];
            assert!(
                !b.fits(&any(b.inputs.len()), &any(b.outputs.len())),
                "{b:?}"
            );
        }
    }
}

/// Any bytes as a saved model (`qnnx_engine::saved::parse`, what `load` checks before QNN sees
/// the binary): either an error, or a layout inside the bytes, non-overlapping, whose binary
/// hashes to the manifest's sha256, and a manifest that serialises and parses back equal.
pub fn saved_model(data: &[u8]) {
    let Ok((layout, manifest)) = qnnx_engine::saved::parse(data) else {
        return;
    };
    assert!(layout.manifest.end <= layout.binary.start && layout.binary.end <= data.len());
    assert!(layout.manifest.start >= qnnx_engine::saved::HEADER_LEN);
    let binary = &data[layout.binary.clone()];
    assert_eq!(binary.len() as u64, manifest.binary_size);
    let sha: String = Sha256::digest(binary)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, manifest.binary_sha256);
    let text = serde_json::to_vec(&manifest).expect("a parsed manifest serialises");
    let back: qnnx_engine::saved::Manifest = serde_json::from_slice(&text).expect("and parses");
    assert_eq!(back, manifest);
    for g in &manifest.graphs {
        // The binding is checked against the graph after QNN loads it; here it must not panic.
        let _ = parse_io_binding(&g.io);
    }
}
