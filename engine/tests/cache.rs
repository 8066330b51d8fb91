//! The context-binary cache (`qnn::cache`). Arbitrary bytes stand in for context binaries except
//! in `htp_binary_round_trips_through_the_cache`, which needs the HTP library.

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qnnx_engine::cache::{Cache, CacheKey, GraphMeta, KeyBuilder, NewEntry, TensorMeta};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qnn-cache-tests-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn base() -> KeyBuilder {
    CacheKey::builder()
        .model(b"onnx bytes")
        .input("x", "float32", &[1, 3, 224, 224])
        .backend("htp")
        .soc_model(60)
        .arch(73)
        .qnn_build_id("v2.40.0")
        .package_version("0.1.0")
        .setting("precision", "fp16")
}

fn key(n: u32) -> CacheKey {
    base().setting("n", &n.to_string()).build()
}

fn new_entry() -> NewEntry {
    let t = |name: &str, dims: &[u32]| TensorMeta {
        name: name.into(),
        dtype: "f32".into(),
        dims: dims.to_vec(),
    };
    NewEntry {
        backend: "htp".into(),
        qnn_build_id: "v2.40.0".into(),
        soc_model: Some(60),
        graphs: vec![GraphMeta {
            name: "g".into(),
            inputs: vec![t("x", &[1, 4])],
            outputs: vec![t("y", &[1, 2])],
        }],
        extra: [("fx".to_string(), "abc123".to_string())].into(),
    }
}

/// Deterministic bytes, different for each seed.
fn bytes(seed: u32, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 24) as u8
        })
        .collect()
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with `tracing` output of this thread captured; returns the warning lines.
fn with_warnings<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let buf = Captured::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text.lines().map(str::to_owned).collect())
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn key_is_stable() {
    // A change here invalidates every user's cache: only change it with the key scheme.
    assert_eq!(
        base().build().as_str(),
        "7e56853f71f4dc2662228f4521de331ebf4208a4e8cd3643c842be7d3735c0e7"
    );
    assert_eq!(base().build(), base().build());
}

#[test]
fn key_changes_with_each_component() {
    let variants = [
        base().build(),
        base().model(b"onnx bytes!").build(),
        base().input("y", "float32", &[1]).build(),
        CacheKey::builder()
            .model(b"onnx bytes")
            .input("x", "float16", &[1, 3, 224, 224])
            .backend("htp")
            .soc_model(60)
            .arch(73)
            .qnn_build_id("v2.40.0")
            .package_version("0.1.0")
            .setting("precision", "fp16")
            .build(),
        CacheKey::builder()
            .model(b"onnx bytes")
            .input("x", "float32", &[1, 3, 224, 225])
            .backend("htp")
            .soc_model(60)
            .arch(73)
            .qnn_build_id("v2.40.0")
            .package_version("0.1.0")
            .setting("precision", "fp16")
            .build(),
        base().backend("gpu").build(),
        base().soc_model(57).build(),
        base().arch(75).build(),
        base().qnn_build_id("v2.41.0").build(),
        base().package_version("0.2.0").build(),
        base().setting("precision", "fp32").build(),
        base().setting("opt_level", "3").build(),
    ];
    let distinct: HashSet<_> = variants.iter().collect();
    assert_eq!(distinct.len(), variants.len(), "{variants:#?}");
    for k in &variants {
        assert_eq!(k.as_str().len(), 64);
        assert_eq!(CacheKey::parse(k.as_str()).as_ref(), Some(k));
    }
}

#[test]
fn key_encoding_has_no_concatenation_collisions() {
    let b = CacheKey::builder;
    assert_ne!(
        b().input("ab", "c", &[1]).build(),
        b().input("a", "bc", &[1]).build()
    );
    assert_ne!(
        b().input("x", "f", &[12, 3]).build(),
        b().input("x", "f", &[1, 23]).build()
    );
    assert_ne!(
        b().input("x", "f", &[1]).input("y", "f", &[]).build(),
        b().input("x", "f", &[1, 0]).build()
    );
    assert_ne!(
        b().setting("ab", "c").build(),
        b().setting("a", "bc").build()
    );
    assert_ne!(b().backend("").build(), b().build(), "unset vs empty");
    assert_ne!(b().soc_model(73).build(), b().arch(73).build());
    assert_ne!(
        b().input("x", "f", &[1]).input("y", "f", &[1]).build(),
        b().input("y", "f", &[1]).input("x", "f", &[1]).build(),
        "inputs bind by position"
    );
    assert_eq!(
        b().setting("a", "1").setting("b", "2").build(),
        b().setting("b", "2").setting("a", "1").build(),
        "settings are sorted"
    );
    assert_eq!(
        b().setting("a", "0").setting("a", "1").build(),
        b().setting("a", "1").build()
    );
    assert_eq!(
        b().package_version(env!("CARGO_PKG_VERSION")).build(),
        b().build()
    );
}

#[test]
fn key_parse_rejects_non_keys() {
    assert!(CacheKey::parse("abc").is_none());
    assert!(CacheKey::parse(&"A".repeat(64)).is_none());
    assert!(CacheKey::parse(&"g".repeat(64)).is_none());
    assert!(CacheKey::parse(&"0".repeat(64)).is_some());
}

#[test]
fn put_then_get_round_trips() {
    let dir = temp_dir("round-trip");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(1);
    assert!(cache.get(&k).unwrap().is_none());
    let bin = bytes(1, 10_000);
    let put = cache.put(&k, &bin, new_entry()).unwrap();
    assert_eq!(
        put.path(),
        dir.join(&k.as_str()[..2])
            .join(format!("{}.bin", k.as_str()))
    );
    assert_eq!(cache.meta_path(&k).extension().unwrap(), "json");
    std::thread::sleep(Duration::from_millis(20));
    let got = cache.get(&k).unwrap().expect("hit");
    assert_eq!(std::fs::read(got.path()).unwrap(), bin);
    let m = got.meta();
    assert_eq!(m.format, qnnx_engine::cache::FORMAT);
    assert_eq!(m.key, k.as_str());
    assert_eq!(m.size, 10_000);
    assert_eq!(m.sha256.len(), 64);
    assert_eq!(
        (m.backend.as_str(), m.qnn_build_id.as_str(), m.soc_model),
        ("htp", "v2.40.0", Some(60))
    );
    assert_eq!(m.graphs, new_entry().graphs);
    assert_eq!(
        m.graphs[0].inputs[0].data_type(),
        Some((qnn::DType::F32, false))
    );
    assert_eq!(m.extra["fx"], "abc123");
    assert_eq!(m.created_unix_ms, put.meta().created_unix_ms);
    assert!(m.last_used_unix_ms > m.created_unix_ms, "{m:?}");
    // A second put replaces the entry.
    let bin2 = bytes(2, 500);
    cache.put(&k, &bin2, new_entry()).unwrap();
    let got = cache.get(&k).unwrap().expect("hit");
    assert_eq!(std::fs::read(got.path()).unwrap(), bin2);
    assert_eq!(cache.list().unwrap().len(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// Puts an entry, damages it with `damage`, and checks that `get` reports a miss, logs one
/// warning containing `problem`, removes the files, and that the key can be stored again.
fn assert_detected(name: &str, problem: &str, damage: impl FnOnce(&Cache, &CacheKey)) {
    let dir = temp_dir(name);
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(7);
    cache.put(&k, &bytes(7, 4096), new_entry()).unwrap();
    damage(&cache, &k);
    let (got, warnings) = with_warnings(|| cache.get(&k));
    assert!(got.unwrap().is_none(), "{name}: damaged entry returned");
    assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains(problem),
        "{name}: {warnings:?}"
    );
    assert!(warnings[0].contains(k.as_str()), "{name}: {warnings:?}");
    assert!(!cache.meta_path(&k).exists(), "{name}: metadata left");
    assert!(!cache.bin_path(&k).exists(), "{name}: binary left");
    assert!(cache.get(&k).unwrap().is_none());
    cache.put(&k, &bytes(8, 100), new_entry()).unwrap();
    assert!(cache.get(&k).unwrap().is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn truncated_binary_is_a_miss() {
    assert_detected("truncated", "4000 bytes, metadata says 4096", |c, k| {
        let p = c.bin_path(k);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..4000]).unwrap();
    });
}

#[test]
fn flipped_byte_is_a_miss() {
    assert_detected("flipped", "sha256", |c, k| {
        let p = c.bin_path(k);
        let mut b = std::fs::read(&p).unwrap();
        b[2048] ^= 0x10;
        std::fs::write(&p, &b).unwrap();
    });
}

#[test]
fn zero_length_binary_is_a_miss() {
    assert_detected("zero-length", "binary is empty", |c, k| {
        std::fs::write(c.bin_path(k), b"").unwrap();
    });
}

#[test]
fn missing_binary_is_a_miss() {
    assert_detected("missing", "binary is missing", |c, k| {
        std::fs::remove_file(c.bin_path(k)).unwrap();
    });
}

#[test]
fn metadata_of_another_key_is_a_miss() {
    assert_detected("other-key", "another key", |c, k| {
        let other = key(8);
        let e = c.put(&other, &bytes(7, 4096), new_entry()).unwrap();
        // Same binary, so only the key tells the metadata apart.
        assert_eq!(
            e.meta().sha256,
            c.get(k).unwrap().unwrap().meta().sha256,
            "setup"
        );
        std::fs::copy(c.meta_path(&other), c.meta_path(k)).unwrap();
    });
}

#[test]
fn garbage_metadata_is_a_miss() {
    assert_detected("garbage-json", "metadata does not parse", |c, k| {
        std::fs::write(c.meta_path(k), b"{\"format\": 1, \"key\": ").unwrap();
    });
}

#[test]
fn metadata_of_another_format_is_a_miss() {
    assert_detected("format", "metadata format 99", |c, k| {
        let p = c.meta_path(k);
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("\"format\": 1", "\"format\": 99")).unwrap();
    });
}

#[test]
fn binary_without_metadata_is_an_incomplete_entry() {
    let dir = temp_dir("incomplete");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(3);
    cache.put(&k, &bytes(3, 100), new_entry()).unwrap();
    std::fs::remove_file(cache.meta_path(&k)).unwrap();
    // Looks like a writer between its two renames: a quiet miss, files left alone.
    let (got, warnings) = with_warnings(|| cache.get(&k));
    assert!(got.unwrap().is_none());
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(cache.bin_path(&k).exists());
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].meta.is_none());
    // Nobody holds its lock, so prune knows it is a leftover and removes it whatever the budget.
    let removed = cache.prune(u64::MAX).unwrap();
    assert_eq!(removed.len(), 1);
    assert!(!cache.bin_path(&k).exists());
    assert_eq!(cache.total_size().unwrap(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn empty_binary_is_refused() {
    let dir = temp_dir("empty-put");
    let cache = Cache::open(&dir, None).unwrap();
    let err = cache.put(&key(1), b"", new_entry()).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cache_under_a_regular_file_is_a_clear_error() {
    let dir = temp_dir("under-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Cache::open(file.join("cache"), None).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cannot create directory") && msg.contains("plain-file"),
        "{msg}"
    );
    // A shard path taken by a file makes `put` fail the same way, naming that path.
    let cache = Cache::open(dir.join("cache"), None).unwrap();
    let k = key(1);
    let shard = cache.dir().join(&k.as_str()[..2]);
    std::fs::write(&shard, b"x").unwrap();
    let err = cache.put(&k, b"bin", new_entry()).unwrap_err();
    assert!(
        err.path == shard && err.to_string().contains(&*shard.to_string_lossy()),
        "{err}"
    );
    let as_engine: qnnx_engine::Error = err.into();
    assert!(matches!(as_engine, qnnx_engine::Error::Cache(_)));
    // Not a damaged entry but a damaged cache folder: an error (the caller's warning), not a
    // silent miss.
    let err = cache.get(&k).unwrap_err();
    assert!(err.path.starts_with(&shard), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(unix)]
#[test]
fn read_only_cache_serves_hits_and_refuses_writes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("read-only");
    let cache = Cache::open(&dir, None).unwrap();
    let (k1, k2) = (key(1), key(2));
    cache.put(&k1, &bytes(1, 100), new_entry()).unwrap();
    let shard1 = cache.dir().join(&k1.as_str()[..2]);
    let set_mode = |mode| {
        for d in [&dir, &shard1] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    };
    set_mode(0o555);
    if std::fs::write(shard1.join("probe"), b"").is_ok() {
        set_mode(0o755);
        eprintln!(
            "skipped: running with privileges that ignore permission bits (root); \
             cache_under_a_regular_file_is_a_clear_error covers the error path"
        );
        std::fs::remove_dir_all(&dir).ok();
        return;
    }
    assert!(
        cache.get(&k1).unwrap().is_some(),
        "hit in a read-only cache"
    );
    let err = cache.put(&k2, &bytes(2, 100), new_entry()).unwrap_err();
    assert!(
        err.to_string().contains(&*dir.to_string_lossy()),
        "error names the folder: {err}"
    );
    set_mode(0o755);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn budget_evicts_least_recently_used() {
    let dir = temp_dir("budget");
    let unlimited = Cache::open(&dir, None).unwrap();
    let (a, b, c, d) = (key(1), key(2), key(3), key(4));
    unlimited.put(&a, &bytes(1, 1000), new_entry()).unwrap();
    let entry_size = unlimited.total_size().unwrap();
    assert!(entry_size > 1000, "binary plus metadata");
    unlimited.clear().unwrap();
    // Room for two entries, not three.
    let cache = Cache::open(&dir, Some(entry_size * 2 + entry_size / 2)).unwrap();
    let pause = || std::thread::sleep(Duration::from_millis(30));
    cache.put(&a, &bytes(1, 1000), new_entry()).unwrap();
    pause();
    cache.put(&b, &bytes(2, 1000), new_entry()).unwrap();
    pause();
    assert!(cache.get(&a).unwrap().is_some(), "a is now the most recent");
    pause();
    cache.put(&c, &bytes(3, 1000), new_entry()).unwrap();
    assert!(
        cache.get(&b).unwrap().is_none(),
        "b was least recently used"
    );
    assert!(cache.get(&a).unwrap().is_some());
    pause();
    assert!(cache.get(&c).unwrap().is_some());
    pause();
    cache.put(&d, &bytes(4, 1000), new_entry()).unwrap();
    assert!(
        cache.get(&a).unwrap().is_none(),
        "a was least recently used"
    );
    assert!(cache.total_size().unwrap() <= cache.budget().unwrap());

    let listed: Vec<String> = cache.list().unwrap().into_iter().map(|s| s.key).collect();
    assert_eq!(listed, [c.to_string(), d.to_string()], "oldest first");
    let removed = cache.prune(0).unwrap();
    let removed: Vec<&str> = removed.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(removed, [c.as_str(), d.as_str()]);
    assert_eq!(cache.total_size().unwrap(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_entry_larger_than_the_budget_is_kept_alone() {
    let dir = temp_dir("over-budget");
    let cache = Cache::open(&dir, Some(500)).unwrap();
    cache.put(&key(1), &bytes(1, 100), new_entry()).unwrap();
    cache.put(&key(2), &bytes(2, 1000), new_entry()).unwrap();
    assert!(cache.get(&key(1)).unwrap().is_none());
    assert!(cache.get(&key(2)).unwrap().is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn clear_and_prune_leave_foreign_files_alone() {
    let dir = temp_dir("foreign");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(1);
    cache.put(&k, &bytes(1, 100), new_entry()).unwrap();
    let shard = cache.dir().join(&k.as_str()[..2]);
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    std::fs::write(shard.join("notes.bin"), b"mine").unwrap();
    std::fs::write(shard.join(format!("{}.txt", k.as_str())), b"mine").unwrap();
    // A temporary file of a writer that died.
    std::fs::write(shard.join(format!(".{}.bin.99999.tmp", k.as_str())), b"xx").unwrap();
    cache.clear().unwrap();
    assert!(cache.get(&k).unwrap().is_none());
    // Shard names are hex digits, which sort before "n".
    assert_eq!(names_in(&dir), [&k.as_str()[..2], "notes.txt"]);
    assert_eq!(
        names_in(&shard),
        [format!("{}.txt", k.as_str()), "notes.bin".into()]
    );
    assert_eq!(cache.total_size().unwrap(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn put_removes_temporaries_of_dead_writers() {
    let dir = temp_dir("stale-temp");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(1);
    let shard = cache.dir().join(&k.as_str()[..2]);
    std::fs::create_dir_all(&shard).unwrap();
    let stale = shard.join(format!(".{}.json.424242.tmp", k.as_str()));
    std::fs::write(&stale, b"{").unwrap();
    cache.put(&k, &bytes(1, 100), new_entry()).unwrap();
    assert!(!stale.exists());
    assert!(cache.invalidate(&k).unwrap());
    assert!(!cache.invalidate(&k).unwrap());
    assert!(cache.get(&k).unwrap().is_none());
    std::fs::remove_dir_all(&dir).ok();
}

/// Payload written by child `id` in round `round`: a header saying what it should be, so a
/// reader can tell a complete payload from a torn or mixed one.
fn payload(id: u32, round: u32) -> Vec<u8> {
    let len = 256 * 1024 + (id as usize * 7 + round as usize * 3) * 4096;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&round.to_le_bytes());
    b.extend_from_slice(&(len as u64).to_le_bytes());
    b.extend(bytes(id * 1000 + round, len - 16));
    b
}

fn is_whole_payload(b: &[u8]) -> bool {
    if b.len() < 16 {
        return false;
    }
    let id = u32::from_le_bytes(b[..4].try_into().unwrap());
    let round = u32::from_le_bytes(b[4..8].try_into().unwrap());
    id < 16 && round < 1000 && payload(id, round) == b
}

const ROUNDS: u32 = 12;

fn shared_key() -> CacheKey {
    base().setting("concurrency", "1").build()
}

fn writers_race(children: u32) {
    let dir = temp_dir(&format!("race-{children}"));
    Cache::open(&dir, None).unwrap();
    let spawned: Vec<_> = (0..children)
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_writes_shared_key",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("QNNX_CACHE_CHILD_DIR", &dir)
                .env("QNNX_CACHE_CHILD_ID", id.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in spawned {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("CHILD OK"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cache = Cache::open(&dir, None).unwrap();
    let k = shared_key();
    let (got, warnings) = with_warnings(|| cache.get(&k));
    let entry = got.unwrap().expect("entry after the race");
    assert!(warnings.is_empty(), "{warnings:?}");
    let b = std::fs::read(entry.path()).unwrap();
    assert!(is_whole_payload(&b), "torn binary");
    assert_eq!(b.len() as u64, entry.meta().size);
    let shard = cache.dir().join(&k.as_str()[..2]);
    let names = names_in(&shard);
    let expected: Vec<String> = ["bin", "json", "lock"]
        .iter()
        .map(|ext| format!("{k}.{ext}"))
        .collect();
    assert_eq!(names, expected, "leftover files");
    assert_eq!(cache.list().unwrap().len(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn two_processes_write_the_same_key() {
    writers_race(2);
}

#[test]
fn four_processes_write_the_same_key() {
    writers_race(4);
}

#[test]
#[ignore = "run by the *_processes_write_the_same_key tests in child processes"]
fn child_writes_shared_key() {
    let dir =
        PathBuf::from(std::env::var_os("QNNX_CACHE_CHILD_DIR").expect("QNNX_CACHE_CHILD_DIR"));
    let id: u32 = std::env::var("QNNX_CACHE_CHILD_ID")
        .unwrap()
        .parse()
        .unwrap();
    let cache = Cache::open(&dir, None).unwrap();
    let k = shared_key();
    let ((), warnings) = with_warnings(|| {
        for round in 0..ROUNDS {
            cache.put(&k, &payload(id, round), new_entry()).unwrap();
            for _ in 0..3 {
                // Every writer holds the lock, so after any put there is always a complete
                // entry.
                let entry = cache.get(&k).unwrap().expect("entry vanished");
                // Another writer may have replaced the file since `get`; whatever is there is
                // whole.
                let b = std::fs::read(entry.path()).unwrap();
                assert!(is_whole_payload(&b), "round {round}: torn binary");
            }
        }
    });
    // A warning would mean a good entry was taken for a bad one (and removed).
    assert!(warnings.is_empty(), "{warnings:?}");
    println!("CHILD OK {id}");
}

#[test]
fn htp_binary_round_trips_through_the_cache() {
    use qnn::{DType, Input, Node, Output};
    let Some((backend, device)) = common::htp() else {
        return;
    };
    let ctx = qnn::Context::new(backend, Some(device)).unwrap();
    let mut g = ctx.build_graph("relu").unwrap();
    let x = g.input("x", DType::F32, &[1, 4]).unwrap();
    let y = g.output("y", DType::F32, &[1, 4]).unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[x]).outputs(&[y]))
        .unwrap();
    g.finalize().unwrap();
    let bin = ctx.to_binary().unwrap();
    let info = qnn::binary_info(&backend.system().unwrap(), &bin).unwrap();
    let build_id = backend.build_id().unwrap();
    let key = CacheKey::builder()
        .model(b"relu model")
        .input("x", "float32", &[1, 4])
        .backend("htp")
        .soc_model(info.soc_model.unwrap_or(0))
        .qnn_build_id(&build_id)
        .build();

    let dir = temp_dir("htp");
    let cache = Cache::open(&dir, None).unwrap();
    cache
        .put(&key, &bin, NewEntry::from_binary_info("htp", &info))
        .unwrap();
    let entry = cache.get(&key).unwrap().expect("hit");
    let m = entry.meta();
    assert_eq!(m.qnn_build_id, build_id);
    assert_eq!(m.graphs.len(), 1);
    assert_eq!(m.graphs[0].name, "relu");
    assert_eq!(
        m.graphs[0].inputs,
        [TensorMeta {
            name: "x".into(),
            dtype: "f32".into(),
            dims: vec![1, 4]
        }]
    );
    assert_eq!(m.graphs[0].outputs[0].name, "y");
    let loaded = entry.load(backend, Some(device)).unwrap();
    let graph = loaded.graph("relu").unwrap();
    let mut out = [0f32; 4];
    graph
        .execute(
            &[Input::new(&[-1f32, 2., -3., 4.])],
            &mut [Output::new(&mut out)],
        )
        .unwrap();
    // fp16 on the emulated NPU: close, not exact.
    let want = [0f32, 2., 0., 4.];
    assert!(
        out.iter().zip(want).all(|(o, w)| (o - w).abs() < 1e-2),
        "{out:?}"
    );

    // Intact as far as the cache can tell, rejected by QNN: the caller invalidates.
    let bogus = CacheKey::builder().model(b"bogus").build();
    cache
        .put(&bogus, &bytes(5, 4096), NewEntry::default())
        .unwrap();
    let entry = cache.get(&bogus).unwrap().expect("hit");
    let err = entry.load(backend, Some(device)).err().expect("accepted");
    assert!(err.to_string().contains(&bogus.to_string()), "{err}");
    assert!(cache.invalidate(&bogus).unwrap());
    assert!(cache.get(&bogus).unwrap().is_none());
    std::fs::remove_dir_all(&dir).ok();
}

/// The number quoted in `qnnx_engine::cache`'s docs:
/// `cargo test --release -p qnnx-engine --test cache -- --ignored hash_cost --nocapture`.
#[test]
#[ignore = "measurement, not a check; run in release mode"]
fn hash_cost_of_a_30_mb_binary() {
    let dir = temp_dir("hash-cost");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(30);
    let bin = bytes(30, 30 * 1000 * 1000);
    cache.put(&k, &bin, new_entry()).unwrap();
    let mut times: Vec<Duration> = (0..11)
        .map(|_| {
            let t = Instant::now();
            assert!(cache.get(&k).unwrap().is_some());
            t.elapsed()
        })
        .collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "get of a 30 MB entry, sha256 of the binary included: best {:.1} ms, median {:.1} ms",
        ms(times[0]),
        ms(times[5])
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The cache is private to its user: folders 0700, files 0600, also for aliases and locks.
#[cfg(unix)]
#[test]
fn entries_are_private_to_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("private");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(1);
    cache.put(&k, &bytes(1, 64), new_entry()).unwrap();
    cache.put_alias(&"cd".repeat(32), &k).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(cache.bin_path(&k).parent().unwrap()), 0o700);
    assert_eq!(mode(&cache.bin_path(&k)), 0o600);
    assert_eq!(mode(&cache.meta_path(&k)), 0o600);
    assert_eq!(mode(&dir.join("fx")), 0o700);
    assert_eq!(mode(&cache.alias_path(&"cd".repeat(32)).unwrap()), 0o600);
    for f in std::fs::read_dir(cache.bin_path(&k).parent().unwrap()).unwrap() {
        let p = f.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    // An entry written by an earlier version (0755 folder, 0644 files) is tightened on a hit.
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    set(&cache.bin_path(&k), 0o644).unwrap();
    set(cache.bin_path(&k).parent().unwrap(), 0o755).unwrap();
    assert!(cache.get(&k).unwrap().is_some());
    assert_eq!(mode(&cache.bin_path(&k)), 0o600);
    assert_eq!(mode(cache.bin_path(&k).parent().unwrap()), 0o700);
    std::fs::remove_dir_all(&dir).ok();
}

/// A folder or entry that group or others can write is not used: someone else could have put
/// a binary there whose metadata and sha256 agree with it.
#[cfg(unix)]
#[test]
fn writable_by_others_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    let dir = temp_dir("writable");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(2);
    cache.put(&k, &bytes(2, 64), new_entry()).unwrap();
    // One entry file planted writable: the entry is skipped, left in place.
    set(&cache.bin_path(&k), 0o666).unwrap();
    assert!(cache.get(&k).unwrap().is_none());
    assert!(cache.bin_path(&k).exists(), "not ours to judge: left alone");
    set(&cache.bin_path(&k), 0o600).unwrap();
    assert!(cache.get(&k).unwrap().is_some());
    // A shared folder: refused as a whole, naming the path and the problem.
    set(&dir, 0o777).unwrap();
    let err = Cache::open(&dir, None).unwrap_err();
    assert!(err.is_untrusted());
    let text = err.to_string();
    assert!(
        text.contains(&*dir.to_string_lossy()) && text.contains("writable by its group"),
        "{text}"
    );
    set(&dir, 0o700).unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// An entry owned by another user is not used (needs root to make one; skipped otherwise).
#[cfg(unix)]
#[test]
fn entries_of_another_user_are_not_used() {
    let dir = temp_dir("owner");
    let cache = Cache::open(&dir, None).unwrap();
    let k = key(3);
    cache.put(&k, &bytes(3, 64), new_entry()).unwrap();
    if std::os::unix::fs::chown(cache.meta_path(&k), Some(65534), None).is_err() {
        eprintln!("skipped: only root can give a file to another user");
        std::fs::remove_dir_all(&dir).ok();
        return;
    }
    assert!(cache.get(&k).unwrap().is_none());
    std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
    let err = Cache::open(&dir, None).unwrap_err();
    assert!(err.to_string().contains("owned by uid 65534"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A binary planted in the cache with metadata that agrees with it (key, size, sha256) but
/// made for another SoC (the folder permissions are what keeps others from doing this; this is
/// the check behind them). The x86_64 emulator would load and run it (docs/qnn-notes.md
/// gotcha 12); the binary-info check refuses it, the entry is removed, the model is compiled
/// again and the new entry is a hit.
#[test]
fn a_planted_binary_for_another_soc_is_not_loaded() {
    use lowering::testing::ModelBuilder;
    use qnnx_engine::{registry, CompileOptions, Target};
    use qnnx_types::BackendKind;
    if common::htp().is_none() {
        return;
    }
    let onnx = ModelBuilder::new(17)
        .input("x", lowering::DType::F32, &[1, 4])
        .node("Relu", &["x"], &["y"], &[])
        .output("y")
        .bytes();
    let opts = CompileOptions {
        name: "qnnx".into(),
        ..Default::default()
    };
    let here = Target::host_default(BackendKind::Htp);
    let other = Target {
        soc_model: Some(57),
        ..here.clone()
    };
    assert_ne!(here.soc_model, other.soc_model);
    let dir = temp_dir("planted");
    let cache = Cache::open(&dir, None).unwrap();
    let foreign = qnnx_engine::compile(&other, &onnx, &opts, Some(&cache)).unwrap();
    let foreign_key = foreign.cache_key.clone().unwrap();
    let runtime = registry::for_target(&here, None, false).unwrap();
    let key = qnnx_engine::compile::key::model_key(&runtime.backend, &onnx, &opts).unwrap();
    std::fs::create_dir_all(cache.bin_path(&key).parent().unwrap()).unwrap();
    std::fs::copy(cache.bin_path(&foreign_key), cache.bin_path(&key)).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cache.meta_path(&foreign_key)).unwrap()).unwrap();
    meta["key"] = key.to_string().into();
    std::fs::write(cache.meta_path(&key), serde_json::to_vec(&meta).unwrap()).unwrap();
    assert!(
        cache.get(&key).unwrap().is_some(),
        "the cache's own checks pass"
    );

    let compiled = qnnx_engine::compile(&here, &onnx, &opts, Some(&cache)).unwrap();
    assert!(!compiled.from_cache, "the planted binary was loaded");
    assert!(
        compiled
            .warnings
            .iter()
            .any(|w| w.contains(&key.to_string())
                && w.contains("is for SoC 57 (SM8650), the target is SoC 60 (SC8380XP)")),
        "{:?}",
        compiled.warnings
    );
    let again = qnnx_engine::compile(&here, &onnx, &opts, Some(&cache)).unwrap();
    assert!(
        again.from_cache && again.warnings.is_empty(),
        "{:?}",
        again.warnings
    );
    std::fs::remove_dir_all(&dir).ok();
}
