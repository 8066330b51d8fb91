//! QNN's profiling API on the real HTP library (the emulator on x86_64): which events finalize,
//! execute and context load record at each level. docs/profiling.md reports what this measured.

mod common;

use common::{context, values};
use qnn::{
    Context, DType, Event, EventUnit, ExpectedBinary, Input, Node, Output, Profile, ProfileLevel,
};

/// fc -> relu -> fc, three nodes with distinct names.
fn mlp(ctx: &Context, name: &str, profile: Option<&Profile>) -> qnn::Graph {
    let (k, n) = (32u32, 64u32);
    let mut g = ctx.build_graph(name).unwrap();
    let xi = g.input("x", DType::F32, &[1, k]).unwrap();
    let w1 = g
        .constant("w1", &[n, k], &values(2, (n * k) as usize, 0.5))
        .unwrap();
    let w2 = g
        .constant("w2", &[k, n], &values(3, (n * k) as usize, 0.5))
        .unwrap();
    let h = g.native("h", DType::F32, &[1, n]).unwrap();
    let r = g.native("r", DType::F32, &[1, n]).unwrap();
    let y = g.output("y", DType::F32, &[1, k]).unwrap();
    g.add_node(
        &Node::new("fc1", "FullyConnected")
            .inputs(&[xi, w1])
            .outputs(&[h]),
    )
    .unwrap();
    g.add_node(&Node::new("relu", "Relu").inputs(&[h]).outputs(&[r]))
        .unwrap();
    g.add_node(
        &Node::new("fc2", "FullyConnected")
            .inputs(&[r, w2])
            .outputs(&[y]),
    )
    .unwrap();
    match profile {
        Some(p) => g.finalize_profiled(p).unwrap(),
        None => g.finalize().unwrap(),
    }
}

fn run(graph: &qnn::Graph, profile: Option<&Profile>) {
    let x = values(1, 32, 1.0);
    let mut y = vec![0f32; 32];
    let (i, mut o) = ([Input::new(&x)], [Output::new(&mut y)]);
    match profile {
        Some(p) => graph.execute_profiled(&i, &mut o, p).unwrap(),
        None => graph.execute(&i, &mut o).unwrap(),
    }
}

fn dump(what: &str, events: &[Event]) {
    eprintln!("== {what}");
    for e in events {
        for (d, e) in e.walk() {
            eprintln!(
                "{:indent$}{} {:?} {} {} {:?} ts={:?}",
                "",
                e.event_type,
                e.type_name(),
                e.value,
                e.unit.suffix(),
                e.identifier,
                e.timestamp_us,
                indent = 2 * d
            );
        }
    }
}

/// Prints the events with `--nocapture` (docs/profiling.md was written from this output).
fn all(what: &str, p: &Profile) -> Vec<Event> {
    let events = p.events().unwrap();
    dump(what, &events);
    events
}

fn find(events: &[Event], t: u32) -> Option<&Event> {
    events
        .iter()
        .flat_map(|e| e.walk())
        .map(|(_, e)| e)
        .find(|e| e.event_type == t)
}

const FINALIZE: u32 = 300;
const EXECUTE: u32 = 400;
const INIT: u32 = 100;
const ACCEL_CYCLES: u32 = 3003;

#[test]
fn detailed_execute_times_every_node_in_cycles() {
    let Some((b, _d, ctx)) = context() else {
        return;
    };
    let g = mlp(&ctx, "g", None);
    let p = Profile::new(&b, ProfileLevel::Detailed).unwrap();
    assert_eq!(p.level(), ProfileLevel::Detailed);
    run(&g, Some(&p));
    let events = all("detailed execute", &p);
    let exec = find(&events, EXECUTE).expect("an EXECUTE event");
    assert_eq!(exec.unit, EventUnit::Microseconds);
    assert!(exec.value > 0, "{exec:?}");
    let accel = find(&events, ACCEL_CYCLES).expect("accelerator cycles");
    let nodes: Vec<&Event> = accel.sub_events.iter().filter(|e| e.is_node()).collect();
    // The graph's three nodes, named "<node>:OpId_<n> (cycles)", between the I/O pseudo-nodes.
    let named: Vec<&str> = nodes
        .iter()
        .filter_map(|e| e.identifier.split_once(':').map(|(n, _)| n))
        .collect();
    assert_eq!(named, ["fc1", "relu", "fc2"], "{nodes:#?}");
    assert!(nodes.iter().all(|e| e.unit == EventUnit::Cycles));
    assert!(nodes.iter().any(|e| e.identifier.starts_with("Input ")));
    assert!(nodes.iter().any(|e| e.identifier.starts_with("Output ")));
    // The node cycles add up to the graph's.
    assert_eq!(nodes.iter().map(|e| e.value).sum::<u64>(), accel.value);
}

#[test]
fn basic_execute_has_whole_graph_times_only() {
    let Some((b, _d, ctx)) = context() else {
        return;
    };
    let g = mlp(&ctx, "g", None);
    let p = Profile::new(&b, ProfileLevel::Basic).unwrap();
    run(&g, Some(&p));
    let events = all("basic execute", &p);
    assert!(
        find(&events, EXECUTE).is_some_and(|e| e.value > 0),
        "{events:#?}"
    );
    assert!(find(&events, ACCEL_CYCLES).is_none(), "{events:#?}");
    assert!(!events
        .iter()
        .flat_map(|e| e.walk())
        .any(|(_, e)| e.is_node()));
}

#[test]
fn a_profile_holds_the_events_of_its_last_call() {
    let Some((b, _d, ctx)) = context() else {
        return;
    };
    let g = mlp(&ctx, "g", None);
    let p = Profile::new(&b, ProfileLevel::Detailed).unwrap();
    let mut counts = Vec::new();
    for _ in 0..3 {
        run(&g, Some(&p));
        let events = p.events().unwrap();
        counts.push(events.iter().filter(|e| e.event_type == EXECUTE).count());
    }
    assert_eq!(counts, [1, 1, 1]);
}

#[test]
fn finalize_and_load_are_profiled() {
    let Some((b, d, ctx)) = context() else {
        return;
    };
    let p = Profile::new(&b, ProfileLevel::Basic).unwrap();
    mlp(&ctx, "basic", Some(&p));
    let events = all("basic finalize", &p);
    let fin = find(&events, FINALIZE).expect("a FINALIZE event");
    assert!(fin.value > 0 && fin.sub_events.is_empty(), "{fin:?}");

    let p = Profile::new(&b, ProfileLevel::Detailed).unwrap();
    mlp(&ctx, "detailed", Some(&p));
    let events = all("detailed finalize", &p);
    let fin = find(&events, FINALIZE).expect("a FINALIZE event");
    // The preparer's phases, untyped (type 0), in microseconds, within the whole.
    let phases: Vec<&str> = fin
        .sub_events
        .iter()
        .map(|e| e.identifier.as_str())
        .collect();
    assert!(phases.contains(&"Graph Optimizations"), "{phases:?}");
    assert!(fin.sub_events.iter().map(|e| e.value).sum::<u64>() <= fin.value);

    let bytes = ctx.to_binary().unwrap();
    let p = Profile::new(&b, ProfileLevel::Basic).unwrap();
    let loaded =
        Context::from_binary_profiled(&b, Some(&d), &bytes, &ExpectedBinary::default(), &p)
            .unwrap();
    let events = all("basic load", &p);
    assert!(
        find(&events, INIT).is_some_and(|e| e.value > 0),
        "{events:#?}"
    );
    // A loaded graph's nodes keep their names.
    let p = Profile::new(&b, ProfileLevel::Detailed).unwrap();
    run(&loaded.graph("detailed").unwrap(), Some(&p));
    let events = all("detailed execute of a loaded graph", &p);
    let accel = find(&events, ACCEL_CYCLES).expect("accelerator cycles");
    assert!(accel
        .sub_events
        .iter()
        .any(|e| e.identifier.starts_with("relu:")));
}
