//! Resource use over many cycles on the real HTP library: 1,000 build/finalize/free cycles and
//! 100,000 executes keep the resident set flat. (The Rust tests also run under valgrind's
//! memcheck or LeakSanitizer by the commands in the README's reliability section.)

mod common;

// The test reads /proc/self/statm, so it and its imports exist on Linux only.
#[cfg(target_os = "linux")]
use qnn::{Context, DType, Input, Node, Output};

#[cfg(target_os = "linux")]
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[cfg(target_os = "linux")]
#[test]
fn build_and_free_1000_graphs_and_execute_100000_times_with_flat_rss() {
    let Some((backend, device)) = common::htp() else {
        return;
    };
    let build = |i: usize| {
        let ctx = Context::new(&backend, Some(&device)).unwrap();
        let mut g = ctx.build_graph(&format!("g{i}")).unwrap();
        let x = g.input("x", DType::F32, &[1, 16]).unwrap();
        let w = g.constant("w", &[16, 16], &[0.01f32; 256]).unwrap();
        let h = g.native("h", DType::F32, &[1, 16]).unwrap();
        let y = g.output("y", DType::F32, &[1, 16]).unwrap();
        g.add_node(
            &Node::new("fc", "FullyConnected")
                .inputs(&[x, w])
                .outputs(&[h]),
        )
        .unwrap();
        g.add_node(&Node::new("relu", "Relu").inputs(&[h]).outputs(&[y]))
            .unwrap();
        (ctx, g.finalize().unwrap())
    };
    let x = vec![1f32; 16];
    let mut out = vec![0f32; 16];
    // Warm-up: the first graphs pay one-time allocations (preparer, thread pools, caches).
    for i in 0..100 {
        let (_ctx, graph) = build(i);
        graph
            .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
            .unwrap();
    }
    let before = rss_kib();
    for i in 100..1000 {
        let (_ctx, graph) = build(i);
        graph
            .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
            .unwrap();
    }
    let after_cycles = rss_kib();
    let (_ctx, graph) = build(1000);
    for _ in 0..1_000 {
        graph
            .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
            .unwrap();
    }
    let before_exec = rss_kib();
    for _ in 0..99_000 {
        graph
            .execute(&[Input::new(&x)], &mut [Output::new(&mut out)])
            .unwrap();
    }
    let after_exec = rss_kib();
    assert!((out[0] - 0.16).abs() < 1e-2, "{}", out[0]);
    println!(
        "RSS: {before} KiB after 100 cycles, {after_cycles} KiB after 1000; {before_exec} KiB -> {after_exec} KiB over 99,000 executes"
    );
    // 900 cycles may grow the heap's high-water mark a little; a leak of even 4 KiB per cycle
    // would exceed this bound.
    assert!(
        after_cycles.saturating_sub(before) < 3_600,
        "RSS grew {} KiB over 900 cycles",
        after_cycles - before
    );
    assert!(
        after_exec.saturating_sub(before_exec) < 1_024,
        "RSS grew {} KiB over 99,000 executes",
        after_exec - before_exec
    );
}
