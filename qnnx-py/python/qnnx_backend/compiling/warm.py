"""Warm starts: the cache folder, the alias from an FX fingerprint to a cached context binary,
and the split alias (the refused FX nodes, the partition rule and its cost decision, and the
context of a split graph's partitions)."""

from __future__ import annotations

import json
import logging
from typing import Any, Optional

from .. import _native
from ..exceptions import CacheError
from ..partitioning import plan as partition_plan
from ..settings import QnnSettings

logger = logging.getLogger("qnnx_backend")


def read_alias(fingerprint: str, spec: "_native.Spec") -> Optional["_native.Compiled"]:
    """The graph the FX fingerprint's alias points at in ``spec``'s cache folder, or None."""
    key = _native.alias_get(spec.cache_dir, fingerprint)
    if key is None:
        return None
    return _native.load_cached(key, spec)


def write_alias(cache_dir: str, fingerprint: str, key: str) -> None:
    try:
        _native.alias_put(cache_dir, fingerprint, key)
    except CacheError as e:
        logger.warning("qnn: could not record the cache alias of %s: %s", fingerprint, e)


def partition_rule(s: QnnSettings) -> dict:
    """The options that choose a split's partitions, as a split alias records them."""
    return {"min_partition_size": s.min_partition_size, "partition_cost": s.partition_cost}


def cost_record(plan: "partition_plan.Plan") -> Optional[dict]:
    """The cost decision of ``plan`` as a split alias stores it (None: the rule was off)."""
    if plan.call_cost_us is None:
        return None
    # Integer nanoseconds (``weigh`` rounds to them): JSON floats may not read back to the bit.
    return {
        "call_cost_ns": round(plan.call_cost_us * 1000),
        "source": plan.cost_source,
        "islands_ns": {k: round(v * 1000) for k, v in plan.islands.items()},
    }


def parse_cost_record(rec: Any) -> Optional[dict]:
    """``cost_record``'s dict read back (ValueError, KeyError or TypeError when it is not one)."""
    if rec is None:
        return None
    source = str(rec["source"])
    if source not in ("measured", "partition_cost"):
        raise ValueError(f"cost source {source!r}")
    return {
        "call_cost_us": int(rec["call_cost_ns"]) / 1000,
        "source": source,
        "islands": {str(k): int(v) / 1000 for k, v in rec["islands_ns"].items()},
    }


def write_split_alias(
    cache_dir: str, fingerprint: str, key: str, by_fx: dict, s: QnnSettings, plan: "partition_plan.Plan"
) -> None:
    """Records that ``fingerprint`` is split at the refused FX nodes ``by_fx`` (by ``s``'s rule,
    with ``plan``'s cost decision) into the partitions of the cached context ``key``."""
    refused = {fx: [list(n) for n in nodes] for fx, nodes in by_fx.items()}
    try:
        _native.alias_put_split(
            cache_dir,
            fingerprint,
            key,
            # The lowering of another qnnx may refuse other nodes: its plan is not reused.
            json.dumps(
                {
                    "qnnx": _native.versions()["qnnx"],
                    "refused": refused,
                    "rule": partition_rule(s),
                    "cost": cost_record(plan),
                }
            ),
        )
    except (CacheError, ValueError) as e:
        logger.warning("qnn: could not record the split alias: %s", e)


def read_split_alias(
    cache_dir: str, fingerprint: str, s: QnnSettings, calls: set
) -> Optional[tuple[str, dict, Optional[dict]]]:
    """(context key, refused FX nodes, stored cost decision) of the split alias of
    ``fingerprint``, or None when there is none usable here: recorded by another qnnx, for
    another partition rule than ``s``'s, unparsable, or naming nodes outside ``calls`` (the
    graph's call nodes)."""
    rec = _native.alias_get_split(cache_dir, fingerprint)
    if rec is None:
        return None
    key, plan_json = rec
    try:
        record = json.loads(plan_json)
        if record.get("qnnx") != _native.versions()["qnnx"]:
            return None
        refused = record["refused"]
        by_fx = {
            str(fx): [partition_plan.UnsupportedNode(str(a), str(b), str(c)) for a, b, c in nodes]
            for fx, nodes in refused.items()
        }
        if record.get("rule") != partition_rule(s):
            # Another min_partition_size or partition_cost chooses other partitions than
            # the cached context holds.
            logger.info("qnn: split alias not used: recorded for %s", record.get("rule"))
            return None
        stored = parse_cost_record(record["cost"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        logger.warning("qnn: ignoring a split alias that does not parse: %s", e)
        return None
    if not by_fx or not set(by_fx) <= calls:
        logger.warning("qnn: ignoring a split alias whose nodes are not this graph's")
        return None
    return key, by_fx, stored
