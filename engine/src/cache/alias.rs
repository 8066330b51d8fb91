//! Aliases: a caller's own fingerprint of a model (the Python package's FX-graph fingerprint:
//! graph code, weights, input signature, options) mapped to the [`CacheKey`] of its compiled
//! binary, so that a warm start finds the binary without exporting ONNX at all.
//!
//! Layout: `<dir>/fx/<fingerprint>.key` holding the key's 64 hex digits. Written atomically
//! (temporary file, then rename): concurrent writers leave one whole alias. An alias is only a
//! pointer: the entry it names is checked like any other on [`Cache::get`].
//!
//! A graph split into QNN partitions and eager nodes has a split alias instead,
//! `<dir>/fx/<fingerprint>.split.json`: `{"key": KEY, "plan": ...}`, the key of the context
//! holding every partition and the caller's plan (which nodes stay eager), so that a warm start
//! splits the graph again without exporting it to find out what the lowering refuses. The plan
//! is the caller's to check against its graph: here it is only required to be JSON, at most
//! [`MAX_PLAN`] bytes.

use std::path::PathBuf;

use super::{Cache, CacheError, CacheKey};

/// Whether `s` is a fingerprint: 64 lowercase hex digits (a sha256).
fn is_fingerprint(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The key an alias file's bytes name: 64 lowercase hex digits, surrounding whitespace allowed.
/// The file is in the cache folder, so nothing about it is trusted; `scripts/fuzz` runs this
/// (and [`Cache::get_alias`] on a file) on arbitrary bytes.
pub fn parse_alias(bytes: &[u8]) -> Option<CacheKey> {
    CacheKey::parse(std::str::from_utf8(bytes).ok()?.trim())
}

/// The largest split-alias file read (a plan names nodes of one graph: a few KB).
pub const MAX_PLAN: usize = 1 << 20;

/// The key and plan of a split alias file's bytes, if it is one (see the module comment).
pub fn parse_split_alias(bytes: &[u8]) -> Option<(CacheKey, serde_json::Value)> {
    if bytes.len() > MAX_PLAN {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let key = CacheKey::parse(v.get("key")?.as_str()?)?;
    Some((key, v.get("plan")?.clone()))
}

impl Cache {
    fn alias_dir(&self) -> PathBuf {
        self.dir().join("fx")
    }

    /// The file of alias `fingerprint`, if it is a valid fingerprint.
    pub fn alias_path(&self, fingerprint: &str) -> Option<PathBuf> {
        is_fingerprint(fingerprint).then(|| self.alias_dir().join(format!("{fingerprint}.key")))
    }

    /// The key alias `fingerprint` points at, if there is one (it may name an entry that is
    /// gone).
    pub fn get_alias(&self, fingerprint: &str) -> Option<CacheKey> {
        let path = self.alias_path(fingerprint)?;
        if let Some(why) = super::private::problem(&path) {
            tracing::warn!("context-binary cache: not using alias {fingerprint}: {why}");
            return None;
        }
        parse_alias(&std::fs::read(path).ok()?)
    }

    /// Points alias `fingerprint` at `key`.
    pub fn put_alias(&self, fingerprint: &str, key: &CacheKey) -> Result<(), CacheError> {
        let path = self.alias_path(fingerprint).ok_or_else(|| CacheError {
            action: "name an alias",
            path: self.alias_dir().join(fingerprint),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a fingerprint is 64 lowercase hex digits",
            ),
        })?;
        let dir = self.alias_dir();
        super::private::create_dir(&dir).map_err(CacheError::new("create directory", &dir))?;
        super::store::write_replacing(&path, key.as_str().as_bytes())
            .map_err(CacheError::new("write", &path))
    }

    fn split_alias_path(&self, fingerprint: &str) -> Option<PathBuf> {
        is_fingerprint(fingerprint)
            .then(|| self.alias_dir().join(format!("{fingerprint}.split.json")))
    }

    /// The key and plan of split alias `fingerprint`, if there is a valid one.
    pub fn get_split_alias(&self, fingerprint: &str) -> Option<(CacheKey, serde_json::Value)> {
        let path = self.split_alias_path(fingerprint)?;
        if let Some(why) = super::private::problem(&path) {
            tracing::warn!("context-binary cache: not using split alias {fingerprint}: {why}");
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        let parsed = parse_split_alias(&bytes);
        if parsed.is_none() {
            tracing::warn!("context-binary cache: split alias {fingerprint} does not parse");
        }
        parsed
    }

    /// Records split alias `fingerprint`: the context `key` and the caller's `plan`.
    pub fn put_split_alias(
        &self,
        fingerprint: &str,
        key: &CacheKey,
        plan: &serde_json::Value,
    ) -> Result<(), CacheError> {
        let bad = |why: &str| CacheError {
            action: "name a split alias",
            path: self.alias_dir().join(fingerprint),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        };
        let path = self
            .split_alias_path(fingerprint)
            .ok_or_else(|| bad("a fingerprint is 64 lowercase hex digits"))?;
        let bytes = serde_json::to_vec(&serde_json::json!({"key": key.as_str(), "plan": plan}))
            .map_err(|e| bad(&e.to_string()))?;
        if bytes.len() > MAX_PLAN {
            return Err(bad("the plan is larger than 1 MiB"));
        }
        let dir = self.alias_dir();
        super::private::create_dir(&dir).map_err(CacheError::new("create directory", &dir))?;
        super::store::write_replacing(&path, &bytes).map_err(CacheError::new("write", &path))
    }

    /// Removes aliases whose entry is gone (or that do not parse): they would only cost a failed
    /// lookup. Returns how many were removed.
    pub fn remove_dangling_aliases(&self) -> usize {
        let Ok(files) = std::fs::read_dir(self.alias_dir()) else {
            return 0;
        };
        let mut removed = 0;
        for f in files.flatten() {
            let name = f.file_name();
            let Some(name) = name.to_str() else { continue };
            let (fingerprint, split) =
                match (name.strip_suffix(".key"), name.strip_suffix(".split.json")) {
                    (Some(f), _) => (f, false),
                    (None, Some(f)) => (f, true),
                    (None, None) => continue,
                };
            if !is_fingerprint(fingerprint) {
                continue;
            }
            let key = if split {
                self.get_split_alias(fingerprint).map(|(k, _)| k)
            } else {
                self.get_alias(fingerprint)
            };
            let live = key.is_some_and(|k| self.meta_path(&k).exists());
            if !live && std::fs::remove_file(f.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_round_trip_and_dangling_ones_are_removed() {
        let dir = std::env::temp_dir().join(format!("qnnx-alias-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::open(&dir, None).unwrap();
        let fp = "ab".repeat(32);
        let key = CacheKey::builder().model(b"m").build();
        assert_eq!(cache.get_alias(&fp), None);
        cache.put_alias(&fp, &key).unwrap();
        assert_eq!(cache.get_alias(&fp), Some(key));
        assert!(cache
            .put_alias("../escape", &CacheKey::builder().build())
            .is_err());
        assert!(cache.alias_path("../escape").is_none());
        // No entry for the key: the alias dangles.
        assert_eq!(cache.remove_dangling_aliases(), 1);
        assert_eq!(cache.get_alias(&fp), None);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn split_aliases_round_trip_and_bad_files_are_misses() {
        let dir = std::env::temp_dir().join(format!("qnnx-split-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::open(&dir, None).unwrap();
        let fp = "cd".repeat(32);
        let key = CacheKey::builder().model(b"m").build();
        let plan = serde_json::json!({"refused": {"det": "Det is not supported"}});
        assert_eq!(cache.get_split_alias(&fp), None);
        cache.put_split_alias(&fp, &key, &plan).unwrap();
        assert_eq!(cache.get_split_alias(&fp), Some((key.clone(), plan)));
        // The plain alias of the same fingerprint is another file.
        assert_eq!(cache.get_alias(&fp), None);
        let path = cache.split_alias_path(&fp).unwrap();
        for bad in [
            &b"{"[..],
            b"[]",
            b"{\"key\": \"zz\", \"plan\": 1}",
            b"{\"plan\": 1}",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(cache.get_split_alias(&fp), None, "{bad:?}");
        }
        assert_eq!(parse_split_alias(&vec![b' '; MAX_PLAN + 1]), None);
        cache
            .put_split_alias(&fp, &key, &serde_json::json!(1))
            .unwrap();
        // No entry for the key: the split alias dangles too.
        assert_eq!(cache.remove_dangling_aliases(), 1);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn alias_text_is_a_key_or_nothing() {
        let k = "ab".repeat(32);
        assert_eq!(parse_alias(k.as_bytes()), CacheKey::parse(&k));
        assert_eq!(
            parse_alias(format!(" {k}\n").as_bytes()),
            CacheKey::parse(&k)
        );
        for bad in [
            &b""[..],
            &b"\xff\xfe"[..],
            k.to_uppercase().as_bytes(),
            &k.as_bytes()[..63],
            format!("{k}0").as_bytes(),
        ] {
            assert_eq!(parse_alias(bad), None, "{bad:?}");
        }
    }
}
