//! HTP performance modes on the real library. The x86_64 emulator (QNN 2.51) implements the
//! perf infrastructure: it accepts every mode's DCVS v3 and RPC polling configs, and refuses
//! what it cannot apply (an unknown config option: 13002 UNSUPPORTED_CONFIG, "Unsupported perf
//! infra power config option"; an unknown client id or device: 13001 INVALID_INPUT). What a
//! vote does to clocks and voltages cannot be seen there: the emulator runs on the host CPU.

mod common;

use qnn::{HtpPerformanceMode, PowerConfig};

#[test]
fn every_mode_is_accepted() {
    let Some((_b, d)) = common::htp() else {
        return;
    };
    let mut p = PowerConfig::new(&d).expect("createPowerConfigId");
    assert_eq!(p.mode(), None);
    for m in HtpPerformanceMode::ALL {
        p.set(m).unwrap_or_else(|e| panic!("{m}: {e}"));
        assert_eq!(p.mode(), Some(m));
    }
}

#[test]
fn each_mode_on_its_own_client_and_clients_are_distinct() {
    let Some((_b, d)) = common::htp() else {
        return;
    };
    let mut clients = Vec::new();
    for m in HtpPerformanceMode::ALL {
        let mut p = PowerConfig::new(&d).expect("createPowerConfigId");
        p.set(m).unwrap_or_else(|e| panic!("{m}: {e}"));
        clients.push(p);
    }
    let mut ids: Vec<u32> = clients.iter().map(|p| p.id()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), HtpPerformanceMode::ALL.len());
    // Dropping destroys each id (destroyPowerConfigId); a failure would be logged, not panic.
    drop(clients);
    let mut again = PowerConfig::new(&d).expect("createPowerConfigId after destroys");
    again.set(HtpPerformanceMode::Burst).unwrap();
}
