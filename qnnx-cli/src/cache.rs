//! `qnnx cache list | clear | prune`, over the context-binary cache the Python package uses
//! ([`qnnx_engine::cache`]), and the cache lines of `qnnx doctor`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use qnnx_engine::cache::{Cache, EntrySummary};
use serde_json::{json, Value};

use crate::{emit, Cli, Failure};

#[derive(clap::Subcommand, Debug)]
pub enum CacheAction {
    /// List the entries, least recently used first.
    List,
    /// Remove every entry.
    Clear,
    /// Remove least recently used entries until the cache takes at most --max-size.
    Prune {
        /// Size budget: bytes, or a number with K, M, G or T (powers of 1024; "500M", "2GiB").
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: u64,
    },
}

/// The cache folder: `--cache-dir`, else [`qnnx_engine::cache::default_dir`] (`$QNNX_CACHE_DIR`, else the
/// platform's cache folder).
pub fn dir(cli: &Cli) -> Option<PathBuf> {
    cli.cache_dir
        .clone()
        .or_else(qnnx_engine::cache::default_dir)
}

/// Parses a size such as `1048576`, `500M`, `1.5G`, `2GiB`, `10KB` (units are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected a number such as 500M or 2G"))?;
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("bad size {s:?}: the unit must be K, M, G or T")),
    };
    Ok((num * scale as f64).round() as u64)
}

/// `1.5 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn ago(unix_ms: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let s = now.saturating_sub(unix_ms) / 1000;
    match s {
        0..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        3600..=86_399 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

fn entry_json(e: &EntrySummary) -> Value {
    let m = e.meta.as_ref();
    json!({
        "key": e.key,
        "bytes": e.bytes,
        "last_used_unix_ms": e.last_used_unix_ms,
        "complete": m.is_some(),
        "backend": m.map(|m| m.backend.clone()),
        "soc_model": m.and_then(|m| m.soc_model),
        "soc": m.and_then(|m| m.soc_model).and_then(qnn::soc::by_model).map(|s| s.name),
        "qnn_build_id": m.map(|m| m.qnn_build_id.clone()),
        "created_unix_ms": m.map(|m| m.created_unix_ms),
        "graphs": m.map(|m| m.graphs.iter().map(|g| g.name.clone()).collect::<Vec<_>>()),
    })
}

/// Opens an existing cache folder without creating one; `None` when there is none.
fn existing(cli: &Cli) -> Result<(PathBuf, Option<Cache>), Failure> {
    let dir = dir(cli).ok_or_else(|| {
        Failure::new("no cache folder is known: pass --cache-dir DIR or set QNNX_CACHE_DIR")
    })?;
    if !dir.is_dir() {
        if dir.exists() {
            return Err(Failure::new(format!(
                "the cache folder {} is not a folder",
                dir.display()
            )));
        }
        return Ok((dir, None));
    }
    let cache = Cache::open(&dir, None)?;
    Ok((dir, Some(cache)))
}

/// The cache section of `qnnx doctor`.
pub fn summary(cli: &Cli) -> Value {
    match existing(cli) {
        Ok((dir, None)) => json!({ "dir": dir, "exists": false, "entries": 0, "bytes": 0 }),
        Ok((dir, Some(c))) => match c.list() {
            Ok(list) => json!({
                "dir": dir,
                "exists": true,
                "entries": list.len(),
                "bytes": c.total_size().unwrap_or(0),
            }),
            Err(e) => json!({ "dir": dir, "exists": true, "error": e.to_string() }),
        },
        Err(f) => json!({ "dir": null, "error": f.msg }),
    }
}

/// One line for `qnnx doctor`.
pub fn describe(v: &Value) -> String {
    let dir = v["dir"].as_str().unwrap_or("(none)");
    if let Some(e) = v["error"].as_str() {
        return format!("{dir}: {e}");
    }
    if v["exists"] != true {
        return format!("{dir} (not created yet)");
    }
    format!(
        "{dir}: {} entries, {}",
        v["entries"],
        human(v["bytes"].as_u64().unwrap_or(0))
    )
}

pub fn cache(cli: &Cli, action: &CacheAction) -> Result<ExitCode, Failure> {
    let (dir, cache) = existing(cli)?;
    match action {
        CacheAction::List => {
            let list = match &cache {
                Some(c) => c.list()?,
                None => Vec::new(),
            };
            let total = match &cache {
                Some(c) => c.total_size()?,
                None => 0,
            };
            let report = json!({
                "dir": dir,
                "entries": list.iter().map(entry_json).collect::<Vec<_>>(),
                "bytes": total,
            });
            emit(cli, &report, || {
                let mut s = format!(
                    "{}: {} entries, {}\n",
                    dir.display(),
                    list.len(),
                    human(total)
                );
                for e in &list {
                    let what = match &e.meta {
                        Some(m) => {
                            let soc = match m.soc_model {
                                Some(n) => qnn::soc::by_model(n)
                                    .map(|s| s.name.to_string())
                                    .unwrap_or_else(|| format!("SoC {n}")),
                                None => "-".into(),
                            };
                            let graphs: Vec<&str> =
                                m.graphs.iter().map(|g| g.name.as_str()).collect();
                            format!(
                                "{} {soc} graphs {graphs:?} QNN {}",
                                m.backend, m.qnn_build_id
                            )
                        }
                        None => "incomplete (being written, or left by a crash)".into(),
                    };
                    s += &format!(
                        "  {}  {:>10}  {:<14} {what}\n",
                        &e.key[..16],
                        human(e.bytes),
                        ago(e.last_used_unix_ms)
                    );
                }
                s
            });
        }
        CacheAction::Clear | CacheAction::Prune { .. } => {
            let max = match action {
                CacheAction::Prune { max_size } => *max_size,
                _ => 0,
            };
            let (removed, aliases, left) = match &cache {
                Some(c) => {
                    let removed = c.prune(max)?;
                    let aliases = c.remove_dangling_aliases();
                    (removed, aliases, c.total_size()?)
                }
                None => (Vec::new(), 0, 0),
            };
            let freed: u64 = removed.iter().map(|e| e.bytes).sum();
            let report = json!({
                "dir": dir,
                "removed": removed.iter().map(entry_json).collect::<Vec<_>>(),
                "removed_bytes": freed,
                "removed_aliases": aliases,
                "bytes": left,
            });
            emit(cli, &report, || {
                format!(
                    "{}: removed {} entries ({}), {} left\n",
                    dir.display(),
                    removed.len(),
                    human(freed),
                    human(left)
                )
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("10 KB"), Ok(10 << 10));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5X").unwrap_err().contains("K, M, G or T"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 19), "1.5 MiB");
    }
}
