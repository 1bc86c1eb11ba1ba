//! The apiserver failing under the Kubernetes store: stopped, frozen, or answering
//! 500 to every write. A call answers 11 within its timeout, naming what it met,
//! leaves nothing behind and frees the lock; once the apiserver is back, calls
//! succeed.

use crate::fair_lock::{queue_dir, wait_until_queued};
use crate::harness::*;
use crate::kube_api::KubeApi;
use crate::kube_store::{apply_manifests, entries_of, held_in, objects_on};
use serde_json::json;
use std::time::{Duration, Instant};

/// The apiserver stopped, then frozen: an ADD answers 11 within `timeoutSeconds` (plus
/// the call's own start); ten ADDs queued behind it answer at once from the silence
/// it met, and a call of another network (the embedded store, same node lock) queued
/// behind three of them is served within that bound; STATUS contacts no store and
/// stays ready; after recovery a call succeeds within `timeoutSeconds`, and what
/// answered 11 left nothing behind.
#[test]
fn with_the_apiserver_stopped_or_frozen_calls_answer_11_within_the_timeout_and_recover() {
    let mut own = KubeApi::start();
    apply_manifests(&own);
    let node = Node::new();
    let name = "k-outage-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let timeout = Duration::from_secs(2);
    let margin = Duration::from_secs(5);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.75.0.0/16", "deadlineSeconds": 30}),
    );
    conf["name"] = "k-outage".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 2});
    let mut local = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.76.0.0/24"}),
    );
    local["name"] = "k-outage-local".into();
    // The first write after the CRD is established waits while the apiserver readies
    // its storage (about 2 s here): that call gets room, the test is about the outage.
    let mut first = conf.clone();
    first["ipam"]["store"]["timeoutSeconds"] = 20.into();
    Call::new("ADD", "before").run(&first).assert_ok();
    for outage in ["stopped", "frozen"] {
        match outage {
            "stopped" => own.stop(),
            _ => own.freeze(),
        }
        let started = Instant::now();
        let lone = Call::new("ADD", &format!("during-{outage}")).run(&conf);
        let took = started.elapsed();
        assert_eq!(lone.error_code(), 11, "{outage}: {lone:?}");
        assert!(took < timeout + margin, "{outage}: the call took {took:?}");
        let status = Call::new("STATUS", "").run(&conf);
        assert!(status.success, "STATUS contacts no store: {status:?}");
        eprintln!("{outage}: an ADD answered 11 after {took:?}");

        // The test holds the queue's first place, so the calls queue in the order
        // spawned; the other network's call joins after the first three.
        let ticket = wasm_ipam::lock::queue::Ticket::take(&queue_dir(&node)).unwrap();
        let mut queued = Vec::new();
        let mut local_call = None;
        for i in 0..10 {
            if i == 3 {
                local_call = Some(Call::new("ADD", &format!("local-{outage}")).spawn(&local));
                wait_until_queued(&node, i + 2);
            }
            queued.push(Call::new("ADD", &format!("queued-{outage}-{i}")).spawn(&conf));
            wait_until_queued(&node, i + 2 + usize::from(i >= 3));
        }
        let released = Instant::now();
        drop(ticket);
        let local_reply = reply(local_call.unwrap().wait_with_output().unwrap());
        let local_took = released.elapsed();
        local_reply.assert_ok();
        let mut asked = 0;
        let mut last = Duration::ZERO;
        for child in queued {
            let answer = reply(child.wait_with_output().unwrap());
            assert_eq!(answer.error_code(), 11, "{outage}: {answer:?}");
            if !answer.msg().contains("failed a call") {
                asked += 1;
            }
            last = released.elapsed();
        }
        eprintln!(
            "{outage}: the other network served after {local_took:?}, 10 queued ADDs answered after {last:?}, {asked} of them asking the apiserver"
        );
        assert!(
            asked <= 2,
            "{outage}: {asked} calls waited for the apiserver"
        );
        assert!(
            last < timeout * 2 + margin,
            "{outage}: the queue took {last:?}"
        );
        assert!(
            local_took < timeout * 2 + margin,
            "{outage}: the other network waited {local_took:?}"
        );

        match outage {
            "stopped" => own.restart(),
            _ => own.thaw(),
        }
        own.wait_ready().unwrap();
        // As a runtime does: tried again until it succeeds, within the remembered
        // silence's window and one timeout.
        let back = Instant::now();
        loop {
            let again = Call::new("ADD", &format!("during-{outage}")).run(&conf);
            if again.success {
                break;
            }
            assert_eq!(again.error_code(), 11, "{outage}: {again:?}");
            assert!(
                back.elapsed() < timeout * 2 + margin,
                "{outage}: still refused {:?} after the apiserver came back: {again:?}",
                back.elapsed()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Exactly the three attachments that succeeded hold addresses; the queued ADDs
    // that answered 11 left nothing.
    let held = held_in(&entries_of(&objects_on(&own, "k-outage")));
    let mut holders: Vec<&str> = held.values().map(String::as_str).collect();
    holders.sort();
    eprintln!("held after the outages: {held:?}");
    assert_eq!(holders.len(), 3, "{held:?}");
    Call::new("DEL", "before").run(&conf).assert_ok();
}

/// The apiserver answering 500 to every write of the store's objects (an admission
/// webhook that cannot be reached, with `failurePolicy: Fail`): an ADD answers 11 at
/// once, naming the answer and the apiserver's message, and leaves nothing behind;
/// once the webhook is gone the same ADD succeeds.
#[test]
fn writes_answered_500_fail_the_call_at_once_with_the_apiservers_words_and_leave_nothing() {
    let own = KubeApi::start();
    apply_manifests(&own);
    let node = Node::new();
    let name = "k-500-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.78.0.0/16"}),
    );
    conf["name"] = "k-500".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 20});
    Call::new("ADD", "before").run(&conf).assert_ok();
    let before = entries_of(&objects_on(&own, "k-500"));
    conf["ipam"]["store"]["timeoutSeconds"] = 2.into();
    own.apply(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: wasm-ipam-test-unreachable
webhooks:
- name: unreachable.test.wasm-ipam.dev
  clientConfig:
    url: https://127.0.0.1:1/validate
  rules:
  - apiGroups: ["ipam.wasm-ipam.dev"]
    apiVersions: ["*"]
    operations: ["CREATE", "UPDATE", "DELETE"]
    resources: ["ipamshards"]
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 1
"#,
    );
    // The webhook takes effect once the apiserver's informer has it: wait for a write
    // of the admin's to be refused.
    let started = Instant::now();
    loop {
        let out = own.kubectl(&[
            "annotate",
            "ipamshards",
            "--all",
            "--overwrite",
            "wasm-ipam.dev/probe=1",
        ]);
        if !out.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the webhook never applied"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();
    let refused = Call::new("ADD", "during").run(&conf);
    let took = started.elapsed();
    assert_eq!(refused.error_code(), 11, "{refused:?}");
    assert!(
        refused.msg().contains("HTTP 500")
            && refused.msg().contains("webhook")
            && refused.msg().contains("nothing was committed"),
        "{refused:?}"
    );
    assert!(took < Duration::from_secs(2 + 5), "took {took:?}");
    eprintln!(
        "an ADD met 500s and answered 11 after {took:?}: {}",
        refused.msg()
    );
    assert_eq!(entries_of(&objects_on(&own, "k-500")), before);
    assert!(
        objects_on(&own, "k-500")
            .values()
            .all(|s| s.get("lock").is_none())
    );

    let out = own.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        "wasm-ipam-test-unreachable",
    ]);
    assert!(out.status.success(), "{out:?}");
    let back = Instant::now();
    loop {
        let again = Call::new("ADD", "during").run(&conf);
        if again.success {
            break;
        }
        assert_eq!(again.error_code(), 11, "{again:?}");
        assert!(back.elapsed() < Duration::from_secs(30), "{again:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let held = held_in(&entries_of(&objects_on(&own, "k-500")));
    assert_eq!(held.len(), 2, "{held:?}");
}
