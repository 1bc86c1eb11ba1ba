//! containerd's CRI plugin runs pods as kubelet asks it to, with Debian's `bridge` and
//! wasm-ipam as its IPAM: the addresses pods get are the ones the store lists, and
//! removing the pods, or giving up on one whose IPAM call waits on the lock, leaves no
//! address, network namespace or veth behind. Needs root; containerd, runc and
//! busybox-static from Debian (scripts/test.sh installs them).

mod support;

use k8s_cri::v1::PodSandboxConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::time::Duration;
use support::containerd::{CannotRun, Containerd};
use support::cri::REQUEST_TIMEOUT;
use support::flocks::waits_on_a_flock;
use support::ipam::{Allocation, RunningCall, has_exited, running_calls};
use support::*;

/// Starts a containerd for `test` with its own bridge and subnet, or says why the
/// machine cannot run one (and the test is skipped).
fn containerd_for(test: &str, number: u32, subnet: &str) -> Option<Containerd> {
    let bridge = format!("wipcri{number}{}", std::process::id() % 100_000);
    match Containerd::start(&bridge, subnet) {
        Ok(containerd) => Some(containerd),
        Err(CannotRun(reason)) => {
            report_skip(test, &reason);
            None
        }
    }
}

/// Stops and removes every sandbox the runtime knows, as kubelet does for pods that
/// are gone, each from its own thread.
fn stop_and_remove_all(containerd: &Containerd) {
    stop_and_remove_all_but(containerd, None);
}

/// Stops and removes every sandbox but `keep`.
fn stop_and_remove_all_but(containerd: &Containerd, keep: Option<&str>) {
    let sandboxes = containerd.cri.list_pod_sandboxes().unwrap();
    std::thread::scope(|s| {
        for sandbox in sandboxes.iter().filter(|s| Some(s.id.as_str()) != keep) {
            s.spawn(|| {
                let cri = &containerd.cri;
                cri.stop_pod_sandbox(&sandbox.id)
                    .unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", sandbox.id));
                cri.remove_pod_sandbox(&sandbox.id)
                    .unwrap_or_else(|e| panic!("RemovePodSandbox {}: {e}", sandbox.id));
            });
        }
    });
}

/// Nothing left: no sandbox, no allocation in the store, no network namespace, no veth
/// on the bridge.
fn assert_nothing_left(containerd: &Containerd) {
    let sandboxes = containerd.cri.list_pod_sandboxes().unwrap();
    assert!(sandboxes.is_empty(), "sandboxes left: {sandboxes:?}");
    let allocations = containerd.ipam.list(wasm_ipam_bin());
    assert!(allocations.is_empty(), "addresses left: {allocations:?}");
    let netns = containerd.netns_left();
    assert!(netns.is_empty(), "network namespaces left: {netns:?}");
    let ports = containerd.bridge_ports();
    assert!(ports.is_empty(), "veths left on the bridge: {ports:?}");
}

#[test]
fn pods_get_the_addresses_wasm_ipam_lists_and_leave_none_behind() {
    let _serial = serial();
    let subnet = "10.201.9.0/24";
    let Some(containerd) = containerd_for(
        "pods_get_the_addresses_wasm_ipam_lists_and_leave_none_behind",
        1,
        subnet,
    ) else {
        return;
    };
    let cri = &containerd.cri;

    let first = cri
        .run_pod_sandbox(containerd.pod_config("solo"), REQUEST_TIMEOUT)
        .unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox: {e}\ncontainerd's log ends:\n{}",
                containerd.log_tail()
            )
        });
    let ip = cri.pod_ip(&first).unwrap();
    assert!(ip.starts_with("10.201.9."), "{ip}");

    // A pod whose sandbox annotations ask for a fixed address gets it: containerd
    // passes them through the conflist's pod-annotations capability.
    let mut fixed = containerd.pod_config("fixed");
    fixed.annotations.insert(
        "wasm-ipam.io/ip-addrs".to_string(),
        r#"["10.201.9.200"]"#.to_string(),
    );
    let fixed = cri
        .run_pod_sandbox(fixed, REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("RunPodSandbox fixed: {e}\n{}", containerd.log_tail()));
    assert_eq!(cri.pod_ip(&fixed).unwrap(), "10.201.9.200");
    cri.stop_pod_sandbox(&fixed).unwrap();
    cri.remove_pod_sandbox(&fixed).unwrap();
    let listed = containerd.ipam.list(wasm_ipam_bin());
    assert_eq!(
        listed,
        [Allocation {
            container_id: first.clone(),
            ifname: "eth0".into(),
            address: ip,
        }],
        "the store lists the pod's address"
    );

    let many: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..20)
            .map(|i| {
                let containerd = &containerd;
                s.spawn(move || {
                    containerd
                        .cri
                        .run_pod_sandbox(
                            containerd.pod_config(&format!("pod-{i}")),
                            REQUEST_TIMEOUT,
                        )
                        .unwrap_or_else(|e| panic!("RunPodSandbox pod-{i}: {e}"))
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });

    let mut by_runtime = BTreeMap::new();
    for id in std::iter::once(&first).chain(&many) {
        by_runtime.insert(id.clone(), cri.pod_ip(id).unwrap());
    }
    let by_store: BTreeMap<String, String> = containerd
        .ipam
        .list(wasm_ipam_bin())
        .into_iter()
        .map(|a| {
            assert_eq!(a.ifname, "eth0", "{a:?}");
            (a.container_id, a.address)
        })
        .collect();
    assert_eq!(by_runtime.len(), 21);
    assert_eq!(
        by_runtime, by_store,
        "each sandbox's IP (PodSandboxStatus) is the address wasm-ipam lists for it"
    );
    let distinct: BTreeSet<&String> = by_runtime.values().collect();
    assert_eq!(distinct.len(), 21, "{by_runtime:?}");
    assert!(
        distinct.iter().all(|ip| ip.starts_with("10.201.9.")),
        "addresses from the conflist's subnet {subnet}: {by_runtime:?}"
    );
    assert_eq!(containerd.netns_left().len(), 21);

    stop_and_remove_all(&containerd);
    assert_nothing_left(&containerd);
    let failed: Vec<_> = containerd
        .ipam
        .invocations()
        .into_iter()
        .filter(|line| line["outcome"] != "ok")
        .collect();
    assert!(failed.is_empty(), "calls that failed: {failed:?}");
}

/// The calls of `command` this runtime (`containerd`) is making now.
fn running_calls_of(containerd: &Containerd, command: &str) -> Vec<RunningCall> {
    running_calls(wasm_ipam_bin(), &containerd.cni_bin_dir)
        .into_iter()
        .filter(|call| call.command == command)
        .collect()
}

/// Still under the held lock (`holder`): the ADD `add` gives up as its caller is
/// killed, and the runtime's cleanup queues a DEL for the same sandbox. Once the lock
/// is free the DEL finishes and no call of this runtime is left running.
fn wait_for_the_cleanup_under_the_lock(containerd: &Containerd, add: &RunningCall, holder: File) {
    wait_for(
        "the orphaned ADD leaves the queue while the lock is still held",
        Duration::from_secs(60),
        || has_exited(add.pid).then_some(()),
    );
    let del = wait_for(
        "containerd's cleanup runs a DEL for the cancelled sandbox, waiting on the lock",
        Duration::from_secs(60),
        || {
            running_calls_of(containerd, "DEL")
                .into_iter()
                .find(|call| call.container_id == add.container_id && waits_on_a_flock(call.pid))
        },
    );
    drop(holder);
    wait_for(
        "the DEL finishes once the lock is free",
        Duration::from_secs(60),
        || has_exited(del.pid).then_some(()),
    );
    wait_for(
        "no wasm-ipam call of this runtime is left running",
        Duration::from_secs(120),
        || {
            running_calls(wasm_ipam_bin(), &containerd.cni_bin_dir)
                .is_empty()
                .then_some(())
        },
    );
}

/// Runs a pod sandbox of `config` (`what` names it in a failure): the address it
/// was given on eth0.
fn run_allocated(containerd: &Containerd, config: PodSandboxConfig, what: &str) -> Allocation {
    let sandbox = containerd
        .cri
        .run_pod_sandbox(config, REQUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    Allocation {
        address: containerd.cri.pod_ip(&sandbox).unwrap(),
        container_id: sandbox,
        ifname: "eth0".into(),
    }
}

/// The call log's invocation lines of sandbox `sandbox`.
fn calls_logged_for(containerd: &Containerd, sandbox: &str) -> Vec<serde_json::Value> {
    containerd
        .ipam
        .invocations()
        .into_iter()
        .filter(|line| line["container_id"] == sandbox)
        .collect()
}

/// kubelet gives up on RunPodSandbox (its deadline passes) while the pod's IPAM call
/// waits for the lock, held here. containerd then kills `bridge`; the orphaned
/// wasm-ipam ADD leaves the queue without allocating, and containerd's own cleanup
/// runs DEL, which waits for the lock too. Once the lock is free the only address
/// allocated is the pod already running, and the pod, retried as kubelet retries it,
/// gets one.
///
/// The node already runs a pod, as nodes do: Debian's bridge (plugins 1.1.1) leaves a
/// bridge whose first ADD failed with an all-zero MAC, and refuses every later ADD
/// ("could not set bridge's mac: invalid argument"), whatever the IPAM.
#[test]
fn a_cancelled_run_pod_sandbox_leaves_no_address() {
    let _serial = serial();
    let Some(containerd) = containerd_for(
        "a_cancelled_run_pod_sandbox_leaves_no_address",
        2,
        "10.201.10.0/24",
    ) else {
        return;
    };
    let bin = wasm_ipam_bin();
    // kubelet's is 4 minutes (twice --runtime-request-timeout); a short one here, long
    // enough for containerd to reach the IPAM call on a loaded machine.
    let deadline = Duration::from_secs(20);
    let resident = run_allocated(
        &containerd,
        containerd.pod_config("resident"),
        "RunPodSandbox",
    );

    let holder = containerd.ipam.hold_lock();
    let (add, cancelled) = std::thread::scope(|s| {
        let run = s.spawn(|| {
            containerd
                .cri
                .run_pod_sandbox(containerd.pod_config("cancelled"), deadline)
        });
        let add = wait_for(
            "the pod's wasm-ipam ADD waits on the held lock",
            Duration::from_secs(120),
            || {
                let waiting = running_calls_of(&containerd, "ADD")
                    .into_iter()
                    .find(|c| waits_on_a_flock(c.pid));
                assert!(
                    waiting.is_some() || !run.is_finished(),
                    "RunPodSandbox ended before its IPAM call was seen waiting on the lock"
                );
                waiting
            },
        );
        (add, run.join().unwrap())
    });
    let status = cancelled.expect_err("RunPodSandbox returned while its IPAM call waited");
    assert!(
        matches!(
            status.code(),
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        ),
        "RunPodSandbox ended by its deadline: {status:?}"
    );
    let sandbox = add.container_id.clone();

    wait_for_the_cleanup_under_the_lock(&containerd, &add, holder);
    stop_and_remove_all_but(&containerd, Some(&resident.container_id));
    assert_eq!(
        containerd.ipam.list(bin),
        std::slice::from_ref(&resident),
        "only the resident pod holds an address"
    );
    assert_eq!(containerd.netns_left().len(), 1);
    assert_eq!(containerd.bridge_ports().len(), 1);

    let for_sandbox = calls_logged_for(&containerd, &sandbox);
    let outcomes: Vec<_> = for_sandbox
        .iter()
        .map(|line| {
            (
                line["command"].as_str().unwrap_or_default(),
                line["outcome"].as_str().unwrap_or_default(),
                line["abandoned_at"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [("ADD", "abandoned", "queue"), ("DEL", "ok", "")],
        "the cancelled sandbox's calls: {for_sandbox:?}"
    );

    let mut retry = containerd.pod_config("cancelled");
    retry.metadata.as_mut().unwrap().attempt = 1;
    let retried = run_allocated(&containerd, retry, "RunPodSandbox, retried");
    let mut expected = vec![resident, retried];
    expected.sort();
    let mut listed = containerd.ipam.list(bin);
    listed.sort();
    assert_eq!(listed, expected);
    stop_and_remove_all(&containerd);
    assert_nothing_left(&containerd);
}

/// Whether `ip` answers one ping from the node (the bridge is the pods' gateway).
fn answers_ping(ip: &str) -> bool {
    std::process::Command::new("ping")
        .args(["-c", "1", "-W", "5", ip])
        .output()
        .expect("run ping (iputils-ping)")
        .status
        .success()
}

/// `wasm-ipam gc --json`'s leaks, as (container id, address, released).
fn gc_leaks(stdout: &str) -> BTreeSet<(String, String, bool)> {
    let json: serde_json::Value = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("gc --json printed no JSON ({e}): {stdout}"));
    json.as_array()
        .expect("gc --json prints an array")
        .iter()
        .map(|l| {
            (
                l["containerID"].as_str().unwrap().to_string(),
                l["address"].as_str().unwrap().to_string(),
                l["released"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Addresses leaked the real way: containerd, its shims and its pods killed and its
/// state wiped (a node reset) while the store keeps their addresses, then containerd
/// started again with new pods. `wasm-ipam gc` finds exactly the leaked ones and
/// releases exactly them, through the module, and never a live pod's; it releases
/// nothing when the runtime cannot answer, answers an empty list, or the leaks are
/// younger than the grace period; and with the default grace it never releases a pod
/// being started by a herd of RunPodSandbox calls racing it.
/// Runs pod `name` on `containerd`: its sandbox's id. A failure shows the end of
/// containerd's log.
fn run_pod(containerd: &Containerd, name: &str) -> String {
    containerd
        .cri
        .run_pod_sandbox(containerd.pod_config(name), REQUEST_TIMEOUT)
        .unwrap_or_else(|e| {
            panic!(
                "RunPodSandbox {name}: {e}\ncontainerd's log ends:\n{}",
                containerd.log_tail()
            )
        })
}

/// `gc` with the default grace racing a herd of eight pods being started: none of
/// theirs goes. The herd's sandboxes.
fn check_gc_spares_a_herd_being_started(
    containerd: &Containerd,
    bin: &Path,
    endpoint: &str,
) -> BTreeSet<String> {
    // The default grace racing a herd of pods being started: none of theirs goes.
    let herd: BTreeSet<String> = std::thread::scope(|s| {
        let pods: Vec<_> = (0..8)
            .map(|i| s.spawn(move || run_pod(containerd, &format!("herd-{i}"))))
            .collect();
        let sweeps: Vec<_> = (0..4)
            .map(|_| {
                let ipam = &containerd.ipam;
                s.spawn(move || ipam.gc(bin, &["--runtime-endpoint", endpoint, "--json"]))
            })
            .collect();
        for sweep in sweeps {
            let (ok, stdout, stderr) = sweep.join().unwrap();
            assert!(ok, "{stderr}");
            assert!(gc_leaks(&stdout).is_empty(), "{stdout}");
        }
        pods.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let held: BTreeSet<String> = containerd
        .ipam
        .list(bin)
        .into_iter()
        .map(|a| a.container_id)
        .collect();
    assert!(herd.is_subset(&held), "a pod of the herd lost its address");
    herd
}

/// The dry run lists exactly the lost pods' addresses (`lost_addresses`, of the
/// sandboxes `lost`), and changes nothing; with the default grace (15 minutes) these
/// young leaks stay. The runtime at `endpoint` runs `held` pods in all.
fn check_dry_run_and_grace_release_nothing(
    containerd: &Containerd,
    bin: &Path,
    endpoint: &str,
    (lost, lost_addresses): (&BTreeSet<String>, &BTreeSet<(String, String)>),
    held: usize,
) {
    let (ok, stdout, stderr) = containerd.ipam.gc(
        bin,
        &[
            "--runtime-endpoint",
            endpoint,
            "--grace",
            "0s",
            "--dry-run",
            "--json",
        ],
    );
    assert!(ok, "{stderr}");
    let expected: BTreeSet<(String, String, bool)> = lost_addresses
        .iter()
        .map(|(id, ip)| (id.clone(), ip.clone(), false))
        .collect();
    assert_eq!(gc_leaks(&stdout), expected);
    assert!(lost_addresses.iter().all(|(id, _)| lost.contains(id)));
    assert_eq!(containerd.ipam.list(bin).len(), held);

    let (ok, stdout, stderr) = containerd
        .ipam
        .gc(bin, &["--runtime-endpoint", endpoint, "--json"]);
    assert!(ok, "{stderr}");
    assert!(gc_leaks(&stdout).is_empty(), "{stdout}");
    assert_eq!(containerd.ipam.list(bin).len(), held);
}

#[test]
fn gc_releases_exactly_the_addresses_a_reset_runtime_lost() {
    let _serial = serial();
    let Some(mut containerd) = containerd_for(
        "gc_releases_exactly_the_addresses_a_reset_runtime_lost",
        3,
        "10.201.11.0/24",
    ) else {
        return;
    };
    let bin = wasm_ipam_bin();
    let lost: BTreeSet<String> = (0..3)
        .map(|i| run_pod(&containerd, &format!("lost-{i}")))
        .collect();
    let lost_addresses: BTreeSet<(String, String)> = containerd
        .ipam
        .list(bin)
        .into_iter()
        .map(|a| (a.container_id, a.address))
        .collect();
    assert_eq!(lost_addresses.len(), 3, "{lost_addresses:?}");

    containerd.crash_and_wipe();
    assert!(containerd.cri.list_pod_sandboxes().unwrap().is_empty());
    assert_eq!(
        containerd.ipam.list(bin).len(),
        3,
        "the store still holds them"
    );
    let endpoint = containerd.endpoint();

    // A runtime that lists no sandbox at all looks like a wrong socket: nothing goes.
    let (ok, _, stderr) = containerd
        .ipam
        .gc(bin, &["--runtime-endpoint", &endpoint, "--grace", "0s"]);
    assert!(!ok && stderr.contains("--allow-empty"), "{stderr}");
    assert_eq!(containerd.ipam.list(bin).len(), 3);

    let live: BTreeSet<String> = (0..2)
        .map(|i| run_pod(&containerd, &format!("live-{i}")))
        .collect();
    let live_ips: Vec<String> = live
        .iter()
        .map(|id| containerd.cri.pod_ip(id).unwrap())
        .collect();
    assert!(live_ips.iter().all(|ip| answers_ping(ip)), "{live_ips:?}");

    // An endpoint that does not answer: an error, nothing released.
    let (ok, _, stderr) = containerd.ipam.gc(
        bin,
        &[
            "--runtime-endpoint",
            "unix:///nonexistent/containerd.sock",
            "--grace",
            "0s",
        ],
    );
    assert!(!ok && stderr.contains("nothing was released"), "{stderr}");
    assert_eq!(containerd.ipam.list(bin).len(), 5);

    check_dry_run_and_grace_release_nothing(
        &containerd,
        bin,
        &endpoint,
        (&lost, &lost_addresses),
        5,
    );

    let herd = check_gc_spares_a_herd_being_started(&containerd, bin, &endpoint);

    // Released for real: exactly the lost ones, through the module's GC.
    let (ok, stdout, stderr) = containerd.ipam.gc(
        bin,
        &["--runtime-endpoint", &endpoint, "--grace", "0s", "--json"],
    );
    assert!(ok, "{stderr}");
    let released: BTreeSet<(String, String, bool)> = lost_addresses
        .iter()
        .map(|(id, ip)| (id.clone(), ip.clone(), true))
        .collect();
    assert_eq!(gc_leaks(&stdout), released);
    let left: BTreeSet<String> = containerd
        .ipam
        .list(bin)
        .into_iter()
        .map(|a| a.container_id)
        .collect();
    let alive: BTreeSet<String> = live.union(&herd).cloned().collect();
    assert_eq!(
        left, alive,
        "the live pods keep their addresses, the lost ones go"
    );
    assert!(live_ips.iter().all(|ip| answers_ping(ip)), "{live_ips:?}");
    let logged: Vec<_> = containerd
        .ipam
        .invocations()
        .into_iter()
        .filter(|line| line["command"] == "gc")
        .collect();
    assert!(
        logged.iter().any(|l| l["outcome"] == "ok"),
        "gc's runs are logged as calls are: {logged:?}"
    );

    // Nothing left to find.
    let (ok, stdout, stderr) = containerd.ipam.gc(
        bin,
        &["--runtime-endpoint", &endpoint, "--grace", "0s", "--json"],
    );
    assert!(ok && gc_leaks(&stdout).is_empty(), "{stdout}{stderr}");
    stop_and_remove_all(&containerd);
    assert_nothing_left(&containerd);
}
