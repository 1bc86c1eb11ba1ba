//! The Kubernetes store under the node's rate limiter and the apiserver's API
//! Priority and Fairness: a wait that cannot fit the budget answers 11 at once, 429s
//! are waited out after the lock, and the node's requests go to the priority level the
//! shipped flow schema names.

use crate::etcd::{operator_on, write_conf};
use crate::harness::*;
use crate::kube_api::KubeApi;
use crate::kube_store::{
    apply_manifests, cluster, entries, entries_of, held_in, kube_requests, node_kubeconfig,
    objects_on, store,
};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// The node's limiter on this store: a call whose requests cannot get their tokens
/// within its budget answers 11 at once, naming the limiter, holding the lock no longer
/// than the budget and committing nothing; with room in the budget the same call waits
/// for its tokens after the lock and succeeds, and its log record says how long.
#[test]
fn the_rate_limiter_answers_11_at_once_when_its_wait_cannot_fit_the_budget() {
    let network = "k-rate";
    let (nodes, mut confs) = cluster(network, 1, &json!({"cidr": "10.77.0.0/16"}));
    // A node's first ADD makes about twenty requests: at two a second after a burst
    // of two, about nine seconds of tokens; the budget is two.
    confs[0]["ipam"]["store"]["qps"] = 2.into();
    confs[0]["ipam"]["store"]["burst"] = 2.into();
    confs[0]["ipam"]["deadlineSeconds"] = 2.into();
    let started = Instant::now();
    let reply = Call::new("ADD", "pod").run(&confs[0]);
    let took = started.elapsed();
    assert_eq!(reply.error_code(), 11, "{reply:?}");
    assert!(
        reply.msg().contains("rate limiter (qps 2, burst 2)") && reply.msg().contains("budget"),
        "{reply:?}"
    );
    assert!(took < Duration::from_secs(2 + 8), "took {took:?}");
    let line = nodes[0].log_lines("invocation").pop().unwrap();
    assert!(line["lock_hold_ms"].as_f64().unwrap() < 2500.0, "{line}");
    assert!(entries(network).is_empty(), "nothing committed");

    // Room in the budget: the call waits for its tokens and succeeds.
    confs[0]["ipam"]["deadlineSeconds"] = 60.into();
    Call::new("ADD", "pod").run(&confs[0]).assert_ok();
    let line = nodes[0].log_lines("invocation").pop().unwrap();
    let waited = line["kube_rate_wait_ms"].as_f64().unwrap();
    let made = line["kube_requests"].as_u64().unwrap();
    eprintln!("{made} requests, {waited} ms waiting for the limiter");
    assert!(waited >= 1000.0, "{line}");
    Call::new("DEL", "pod").run(&confs[0]).assert_ok();
}

/// The priority level of the node's requests in the 429 test: no seats of its own,
/// none to borrow, and no queue.
const NO_SEATS: &str = "wasm-ipam-test-no-seats";

/// The sum of the apiserver's metric `name` over the series of priority level
/// `level`, as the admin reads /metrics.
fn level_metric(api: &KubeApi, name: &str, level: &str) -> f64 {
    let out = api.kubectl(&["get", "--raw", "/metrics"]);
    assert!(out.status.success(), "{out:?}");
    let series = format!("priority_level=\"{level}\"");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&series))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// A `kubectl` the test started, killed and reaped when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The user of the request that keeps the level without seats busy.
const HOLDER_USER: &str = "wasm-ipam-test-holder";
/// The requests running in a priority level, and those it rejected.
const EXECUTING: &str = "apiserver_flowcontrol_current_executing_requests";
const REJECTED: &str = "apiserver_flowcontrol_rejected_requests_total";

/// Mutating webhooks on ConfigMaps labelled `wasm-ipam-test/hold: yes`, at `port`,
/// which accepts connections and never completes TLS: a create waits 10 s on each.
fn holding_webhooks(port: u16) -> String {
    (0..4)
        .map(|i| {
            format!(
                r#"- name: hold-{i}.test.wasm-ipam.dev
  clientConfig:
    url: https://127.0.0.1:{port}/hold
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
  objectSelector:
    matchLabels: {{wasm-ipam-test/hold: "yes"}}
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 30
"#
            )
        })
        .collect()
}

/// The test's flow schema, ahead of every other: what `rules` match goes to the level
/// without seats.
fn flow_schema_to_no_seats(rules: &str) -> String {
    format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: wasm-ipam-test-429
spec:
  priorityLevelConfiguration:
    name: {NO_SEATS}
  matchingPrecedence: 100
  distinguisherMethod:
    type: ByUser
  rules:
{rules}"#
    )
}

/// Rules sending every request of the node's `user` and of the holder to the level.
fn all_requests_of(user: &str) -> String {
    format!(
        r#"  - subjects:
    - kind: User
      user:
        name: "{user}"
    - kind: User
      user:
        name: {HOLDER_USER}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
    nonResourceRules:
    - verbs: ["*"]
      nonResourceURLs: ["*"]
"#
    )
}

/// Rules sending every request of the holder, and only the writes of the node's
/// `user`, to the level.
fn writes_of(user: &str) -> String {
    format!(
        r#"  - subjects:
    - kind: User
      user:
        name: {HOLDER_USER}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
  - subjects:
    - kind: User
      user:
        name: "{user}"
    resourceRules:
    - verbs: [create, update, delete]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
"#
    )
}

/// Applies the level without seats that rejects rather than queues, the flow schema
/// sending `user`'s requests there, the holder's right to create ConfigMaps and the
/// webhooks at `port` that hold its create; returns once the flow schema is in effect.
fn apply_the_level_without_seats(own: &KubeApi, user: &str, port: u16) {
    let all_to_no_seats = flow_schema_to_no_seats(&all_requests_of(user));
    let webhooks = holding_webhooks(port);
    own.apply(&format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: {NO_SEATS}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 0
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Reject
---
{all_to_no_seats}---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {HOLDER_USER}
  namespace: default
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {HOLDER_USER}
  namespace: default
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {HOLDER_USER}
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {HOLDER_USER}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: wasm-ipam-test-hold
webhooks:
{webhooks}"#
    ));
    // The flow schema is in effect once the apiserver has marked it not dangling.
    let out = own.kubectl(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}=False",
        "--timeout=60s",
        "flowschema/wasm-ipam-test-429",
    ]);
    assert!(out.status.success(), "{out:?}");
}

/// A ConfigMap create by the holder (`holder` its kubeconfig) held by the webhooks,
/// running in the level without seats. Held once the level shows a request running;
/// one that ended first met the webhooks before the apiserver had them, and is sent
/// again.
fn hold_the_level(own: &KubeApi, dir: &Path, holder: &Path) -> Running {
    let held_cm = dir.join("hold.json");
    std::fs::write(
        &held_cm,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"generateName": "hold-", "labels": {"wasm-ipam-test/hold": "yes"}}})
        .to_string(),
    )
    .unwrap();
    let started = Instant::now();
    loop {
        let mut running = Running(
            std::process::Command::new(crate::kube_api::peers().join("kubectl"))
                .arg("--kubeconfig")
                .arg(holder)
                .args([
                    "create",
                    "--raw",
                    "/api/v1/namespaces/default/configmaps",
                    "-f",
                ])
                .arg(&held_cm)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let holds = loop {
            if level_metric(own, EXECUTING, NO_SEATS) >= 1.0 {
                break true;
            }
            if running.0.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no request of {HOLDER_USER} held level {NO_SEATS} in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        if holds {
            return running;
        }
    }
}

/// The seconds of the Retry-After a refusal's message names.
fn retry_after_asked(msg: &str) -> u64 {
    let (_, after) = msg
        .split_once("asks to retry after ")
        .unwrap_or_else(|| panic!("no Retry-After named: {msg}"));
    after.split(' ').next().unwrap().parse().unwrap()
}

/// Checks an ADD refused for the apiserver's 429s within `bound_ms`, by its reply and
/// its log record: code 11 naming the answer, each Retry-After that fitted waited out
/// under the lock and counted as a wait, the lock let go before the bound. Returns
/// the requests the call sent.
fn check_refused_for_429(reply: &Reply, record: &Value, bound_ms: f64) -> u64 {
    assert_eq!(reply.error_code(), 11, "{reply:?}");
    let msg = reply.msg();
    assert!(
        msg.contains("HTTP 429") && msg.contains("nothing was committed"),
        "{reply:?}"
    );
    assert!(!msg.contains("ran out"), "waited to the end: {reply:?}");
    // The apiserver's Retry-After: whole seconds, at least one.
    let retry_after = retry_after_asked(msg);
    assert!(retry_after >= 1, "{reply:?}");
    let retry_after = retry_after as f64 * 1000.0;
    let requests = record["kube_requests"].as_u64().unwrap();
    let hold = record["lock_hold_ms"].as_f64().unwrap();
    // Sent again after each wait that fitted, and no more.
    assert!(requests >= 2, "{record}");
    assert!((requests - 1) as f64 * retry_after < bound_ms, "{record}");
    // The waits were made under the lock, and it was let go before the bound;
    // the call's record counts them as waits, as the rate limiter's.
    assert!(hold >= (requests - 1) as f64 * retry_after, "{record}");
    let waited = record["kube_rate_wait_ms"].as_f64().unwrap();
    assert!(waited >= (requests - 1) as f64 * retry_after, "{record}");
    assert!(hold < bound_ms, "{record}");
    requests
}

/// Runs an ADD with `conf` on `node`: its reply, the time it took and its log record.
fn timed_add(node: &Node, conf: &Value) -> (Reply, Duration, Value) {
    let started = Instant::now();
    let reply = Call::new("ADD", "pod").run(conf);
    let took = started.elapsed();
    let record = node.log_lines("invocation").pop().unwrap();
    (reply, took, record)
}

/// With only the node's writes refused: once the apiserver has taken up the new rules
/// (until then the reads are still refused), an ADD's reads are served, its first
/// write (the home's create) meets the 429s, and it answers 11 before the write's
/// bound with nothing committed.
fn check_writes_alone_refused(node: &Node, conf: &Value) {
    let changed = Instant::now();
    let (refused, record) = loop {
        let refused = Call::new("ADD", "pod").run(conf);
        let record = node.log_lines("invocation").pop().unwrap();
        assert_eq!(refused.error_code(), 11, "{refused:?}");
        if !refused.msg().contains("get ipamshards") {
            break (refused, record);
        }
        assert!(
            changed.elapsed() < Duration::from_secs(30),
            "the node's reads still refused 30 s after the flow schema changed"
        );
    };
    eprintln!("writes refused: {refused:?}\n{record}");
    assert!(
        refused.msg().contains("post ipamshards") || refused.msg().contains("put ipamshards"),
        "{refused:?}"
    );
    let msg = refused.msg();
    assert!(
        msg.contains("HTTP 429")
            && msg.contains("nothing was committed")
            && !msg.contains("ran out"),
        "{refused:?}"
    );
    // The write's bound is timeoutSeconds (3 s) from its first try: two waits of a
    // second fit in it, and they are counted as waits; the reads before it were served.
    let waited = record["kube_rate_wait_ms"].as_f64().unwrap();
    let hold = record["lock_hold_ms"].as_f64().unwrap();
    assert!(waited >= 2000.0 && hold < 3000.0 + 1000.0, "{record}");
    assert!(record["kube_requests"].as_u64().unwrap() >= 4, "{record}");
}

/// Once the flow schema is gone and the node's requests are served again, the same
/// ADD succeeds (answering 11 until the apiserver has taken the change up), and the
/// store is sound.
fn check_served_again(own: &KubeApi, node: &Node, conf: &Value, network: &str) {
    let out = own.kubectl(&["delete", "flowschema", "wasm-ipam-test-429"]);
    assert!(out.status.success(), "{out:?}");
    let back = Instant::now();
    loop {
        let again = Call::new("ADD", "pod").run(conf);
        if again.success {
            break;
        }
        assert_eq!(again.error_code(), 11, "{again:?}");
        assert!(back.elapsed() < Duration::from_secs(30), "{again:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "served again {:?} after the flow schema's removal",
        back.elapsed()
    );
    let held = held_in(&entries_of(&objects_on(own, network)));
    assert_eq!(held.values().collect::<Vec<_>>(), ["pod"], "{held:?}");
    let conf_file = write_conf(node, conf);
    let (ok, stdout, stderr) = operator_on(node, &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
    Call::new("DEL", "pod").run(conf).assert_ok();
}

/// The apiserver answering 429 (API Priority and Fairness on, the node's user routed
/// to a level of no seats that rejects rather than queues): an ADD waits out each
/// `Retry-After` after the lock while the retry fits, answers 11 at once when it does
/// not (within `timeoutSeconds`, or within the call's budget), naming the answer,
/// and leaves nothing behind; once the node's requests are served again the same ADD
/// succeeds and the store checks sound.
///
/// A level of zero seats still serves a request when none of its own runs (the
/// apiserver lets a request wider than the limit through alone), so one request of
/// another user routed to it is kept running: a ConfigMap create held by mutating
/// webhooks whose address accepts connections and never completes TLS (10 s each).
#[test]
fn answers_429_are_waited_out_after_the_lock_and_one_that_cannot_fit_answers_11_at_once() {
    // Measures time against bounds of a second or so.
    let _heavy = exclusive();
    let own = KubeApi::start_with(&["--enable-priority-and-fairness=true"]);
    apply_manifests(&own);
    let network = "k-429";
    let name = "k-429-node";
    let user = format!("system:node:{name}");
    let kubeconfig = own.kubeconfig_for(&user, &["system:nodes"]);
    let holder = own.kubeconfig_for(HOLDER_USER, &[]);
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.88.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 3});

    let never_answers = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = never_answers.local_addr().unwrap().port();
    apply_the_level_without_seats(&own, &user, port);
    let mut holding = hold_the_level(&own, node.dir.path(), &holder);
    let held_since = Instant::now();

    // What is left of timeoutSeconds (3 s) takes two waits of Retry-After (1 s): the
    // third 429 answers 11 at once, not at the end of the 3 s.
    let rejected = level_metric(&own, REJECTED, NO_SEATS);
    let (refused, took, record) = timed_add(&node, &conf);
    let rejected = level_metric(&own, REJECTED, NO_SEATS) - rejected;
    eprintln!("timeoutSeconds 3: answered after {took:?}: {refused:?}\n{record}");
    let requests = check_refused_for_429(&refused, &record, 3000.0);
    assert_eq!(rejected, requests as f64, "the apiserver's 429s: {record}");
    assert!(took < Duration::from_secs(3 + 2), "took {took:?}");

    // The call's budget is the bound (deadlineSeconds 2.5): once a Retry-After cannot
    // come within what is left of it, 11 at once.
    let mut short = conf.clone();
    short["ipam"]["deadlineSeconds"] = json!(2.5);
    short["ipam"]["store"]["timeoutSeconds"] = json!(2.5);
    let (refused, took, record) = timed_add(&node, &short);
    eprintln!("deadlineSeconds 2.5: answered after {took:?}: {refused:?}\n{record}");
    check_refused_for_429(&refused, &record, 2500.0);
    assert!(
        record["budget_used_ms"].as_f64().unwrap() < 2500.0,
        "{record}"
    );
    assert!(
        holding.0.try_wait().unwrap().is_none(),
        "the held request ended after {:?}: the node's requests may have been served",
        held_since.elapsed()
    );
    assert!(objects_on(&own, network).is_empty(), "nothing committed");

    // Writes alone refused.
    own.apply(&flow_schema_to_no_seats(&writes_of(&user)));
    check_writes_alone_refused(&node, &conf);
    assert!(
        holding.0.try_wait().unwrap().is_none(),
        "the held request ended after {:?}",
        held_since.elapsed()
    );
    assert!(objects_on(&own, network).is_empty(), "nothing committed");

    // Served again.
    drop(holding);
    check_served_again(&own, &node, &conf, network);
    drop(never_answers);
}

/// The apiserver's counter `apiserver_flowcontrol_dispatched_requests_total` of the
/// requests flow schema `schema` classified and level `level` dispatched.
fn dispatched(api: &KubeApi, schema: &str, level: &str) -> f64 {
    let out = api.kubectl(&["get", "--raw", "/metrics"]);
    assert!(out.status.success(), "{out:?}");
    let (schema, level) = (
        format!("flow_schema=\"{schema}\""),
        format!("priority_level=\"{level}\""),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|l| l.contains(&schema) && l.contains(&level))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// With API Priority and Fairness on and the manifests applied, a node's requests are
/// classified by the flow schema `wasm-ipam kubernetes manifests` prints into its own
/// priority level: the apiserver dispatched there exactly the requests the node's
/// ADD and DEL logged, none of them through the built-in `system-nodes` (which takes
/// the group's other requests) or `global-default`, and rejected none.
#[test]
fn the_nodes_requests_are_classified_by_the_shipped_flow_schema_into_its_priority_level() {
    // The name the manifests give the priority level and the flow schema.
    const FLOW_NAME: &str = "wasm-ipam";
    let own = KubeApi::start_with(&["--enable-priority-and-fairness=true"]);
    apply_manifests(&own);
    // In effect once the apiserver has marked it not dangling (its level exists).
    let out = own.kubectl(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}=False",
        "--timeout=60s",
        &format!("flowschema/{FLOW_NAME}"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let precedence = |schema: &str| -> u32 {
        let out = own.kubectl(&[
            "get",
            "flowschema",
            schema,
            "-o",
            "jsonpath={.spec.matchingPrecedence}",
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).parse().unwrap()
    };
    let (ours, system_nodes) = (precedence(FLOW_NAME), precedence("system-nodes"));
    eprintln!("matchingPrecedence: {FLOW_NAME} {ours}, system-nodes {system_nodes}");
    assert!(
        ours < system_nodes,
        "{ours} does not win over {system_nodes}"
    );
    eprintln!(
        "the level's nominal seats: {}",
        level_metric(&own, "apiserver_flowcontrol_nominal_limit_seats", FLOW_NAME)
    );

    let network = "k-apf";
    let name = "k-apf-node";
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.89.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] = store(&node_kubeconfig(&own, name));

    let counts = || {
        [
            dispatched(&own, FLOW_NAME, FLOW_NAME),
            dispatched(&own, "system-nodes", "system"),
            dispatched(&own, "global-default", "global-default"),
            level_metric(
                &own,
                "apiserver_flowcontrol_rejected_requests_total",
                FLOW_NAME,
            ),
        ]
    };
    let before = counts();
    Call::new("ADD", "pod").run(&conf).assert_ok();
    Call::new("ADD", "pod-2").run(&conf).assert_ok();
    Call::new("DEL", "pod").run(&conf).assert_ok();
    let after = counts();
    let made: u64 = kube_requests(&node).iter().sum();
    let seen: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    eprintln!(
        "requests logged {made} ({:?}); dispatched by {FLOW_NAME}, system-nodes, global-default, rejected: {seen:?}",
        kube_requests(&node)
    );
    assert!(made > 0);
    assert_eq!(seen, [made as f64, 0.0, 0.0, 0.0], "logged {made}");

    // Without the flow schema the same requests go to `system-nodes` (once the
    // apiserver has dropped it: a DEL again until one is classified there whole).
    let out = own.kubectl(&["delete", "flowschema", FLOW_NAME]);
    assert!(out.status.success(), "{out:?}");
    let started = Instant::now();
    loop {
        let before = counts();
        Call::new("DEL", "pod-2").run(&conf).assert_ok();
        let made = *kube_requests(&node).last().unwrap() as f64;
        let seen: Vec<f64> = counts().iter().zip(before).map(|(a, b)| a - b).collect();
        if made > 0.0 && seen[..2] == [0.0, made] {
            eprintln!(
                "without it, after {:?}: {made} requests by system-nodes",
                started.elapsed()
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the node's DEL ({made} requests) was not classified by system-nodes within 30 s of the flow schema's removal: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
