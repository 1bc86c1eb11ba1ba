//! The module's logic over the SDK's `MemoryStore`: nodes are requests with distinct
//! node names on one store, as they share one etcd.

use super::*;
use serde_json::json;
use wasm_ipam_guest::store::MemoryStore;

fn config(extra: serde_json::Value) -> serde_json::Value {
    let mut ipam = json!({"cidr": "10.244.0.0/24", "blockSize": 28, "blockGraceSeconds": 60});
    for (k, v) in extra.as_object().unwrap() {
        ipam[k] = v.clone();
    }
    json!({"cniVersion": "1.1.0", "name": "pods", "ipam": ipam})
}

fn call(command: Command, node: &str, id: &str, at: u64, conf: &serde_json::Value) -> Request {
    Request::for_test(command, id, "eth0", conf.clone())
        .with_node_name(node)
        .with_lock_granted_at(at)
}

fn add(store: &mut MemoryStore, node: &str, id: &str, at: u64, conf: &serde_json::Value) -> String {
    let result = ClusterPool::add(&call(Command::Add, node, id, at, conf), store).unwrap();
    result.ips[0].address.clone()
}

fn del(store: &mut MemoryStore, node: &str, id: &str, at: u64, conf: &serde_json::Value) {
    ClusterPool::del(&call(Command::Del, node, id, at, conf), store).unwrap();
}

/// An address without its prefix length.
fn bare(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

fn block_of(cidr: &str) -> String {
    let ip: IpAddr = cidr.split('/').next().unwrap().parse().unwrap();
    Range::new("10.244.0.0/24".parse().unwrap(), 28)
        .unwrap()
        .block_of(ip)
        .unwrap()
        .to_string()
}

fn owner(store: &MemoryStore, block: &str) -> Option<String> {
    read::<Block>(store, &format!("blk/{block}"))
        .unwrap()
        .map(|b| b.node)
}

#[test]
fn nodes_claim_their_own_blocks_and_fill_them_first() {
    let conf = config(json!({}));
    let mut store = MemoryStore::default();
    // A /28 block has 13 usable addresses.
    let a: Vec<String> = (0..14)
        .map(|i| add(&mut store, "a", &format!("a{i}"), 1, &conf))
        .collect();
    let b = add(&mut store, "b", "b0", 1, &conf);
    let first = block_of(&a[0]);
    assert!(a[..13].iter().all(|ip| block_of(ip) == first), "{a:?}");
    assert_ne!(
        block_of(&a[13]),
        first,
        "a full block makes the node claim another"
    );
    assert_eq!(owner(&store, &first).as_deref(), Some("a"));
    assert_eq!(owner(&store, &block_of(&a[13])).as_deref(), Some("a"));
    assert_eq!(owner(&store, &block_of(&b)).as_deref(), Some("b"));
    assert!(a.iter().all(|ip| ip.ends_with("/28")));
    // The gateway is the block's second address; no pod gets it.
    let result = ClusterPool::add(&call(Command::Add, "b", "b0", 1, &conf), &mut store).unwrap();
    assert_eq!(
        result.ips[0].address, b,
        "an ADD again answers the same address"
    );
    let gateway: IpAddr = result.ips[0].gateway.clone().unwrap().parse().unwrap();
    assert!(
        a.iter()
            .chain([&b])
            .all(|ip| !ip.starts_with(&format!("{gateway}/")))
    );
}

#[test]
fn del_is_idempotent_and_an_empty_block_is_freed_after_its_grace() {
    let conf = config(json!({}));
    let mut store = MemoryStore::default();
    let ip = add(&mut store, "a", "c1", 100, &conf);
    let block = &block_of(&ip);
    assert_eq!(owner(&store, block).as_deref(), Some("a"), "{ip}");
    del(&mut store, "a", "c1", 110, &conf);
    del(&mut store, "a", "c1", 111, &conf);
    assert_eq!(
        owner(&store, block).as_deref(),
        Some("a"),
        "kept within the grace"
    );
    // The next DEL (of anything) past the grace frees it.
    del(&mut store, "a", "unknown", 171, &conf);
    assert_eq!(owner(&store, block), None);
    assert!(store.list("aff/a/").is_empty());
    assert_eq!(
        read::<BTreeSet<IpNet>>(&store, "pool/10.244.0.0/24")
            .unwrap()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn gc_releases_only_this_nodes_stale_attachments() {
    let conf = config(json!({}));
    let mut store = MemoryStore::default();
    add(&mut store, "a", "keep", 1, &conf);
    add(&mut store, "a", "stale", 1, &conf);
    add(&mut store, "b", "other", 1, &conf);
    let valid = [Attachment {
        container_id: "keep".into(),
        ifname: "eth0".into(),
    }];
    ClusterPool::gc(&call(Command::Gc, "a", "", 2, &conf), &valid, &mut store).unwrap();
    let held: Vec<String> =
        ClusterPool::allocations(&Context::for_test("pods", Some(conf.clone())), &store)
            .unwrap()
            .into_iter()
            .map(|a| a.container_id)
            .collect();
    assert_eq!(held, ["keep", "other"]);
}

#[test]
fn a_sticky_pod_gets_its_address_back_on_another_node_and_nobody_else_does_meanwhile() {
    let conf = config(json!({"stickySeconds": 300}));
    let mut store = MemoryStore::default();
    let pod = [("K8S_POD_NAMESPACE", "db"), ("K8S_POD_NAME", "db-0")];
    let first = ClusterPool::add(
        &call(Command::Add, "a", "c1", 10, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    ClusterPool::del(
        &call(Command::Del, "a", "c1", 20, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    // Node a's next pod does not get the kept address.
    let other = add(&mut store, "a", "c2", 30, &conf);
    assert_ne!(other, first.ips[0].address);
    // The pod, rescheduled on node b, gets it back.
    let again = ClusterPool::add(
        &call(Command::Add, "b", "c3", 40, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    assert_eq!(bare(&again.ips[0].address), bare(&first.ips[0].address));
    assert!(
        again.ips[0].address.ends_with("/32"),
        "node a's block lends it: {again:?}"
    );
    assert!(store.get("sticky/db/db-0").is_none());

    // Past its retention the address is free for anyone.
    ClusterPool::del(
        &call(Command::Del, "b", "c3", 50, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    let late = ClusterPool::add(
        &call(Command::Add, "b", "c4", 50 + 301, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    assert_ne!(late.ips[0].address, "", "an address all the same");
    let held: Vec<_> =
        ClusterPool::allocations(&Context::for_test("pods", Some(conf.clone())), &store).unwrap();
    assert_eq!(held.len(), 2, "{held:?}");
}

#[test]
fn requested_addresses_and_dual_stack() {
    let conf = config(json!({"cidr": ["10.244.0.0/24", "fd00:10::/120"], "blockSizeV6": 124}));
    let mut store = MemoryStore::default();
    let result = ClusterPool::add(
        &call(Command::Add, "a", "c1", 1, &conf).with_args(&[("IP", "10.244.0.200")]),
        &mut store,
    )
    .unwrap();
    let addresses: Vec<&str> = result.ips.iter().map(|i| i.address.as_str()).collect();
    assert_eq!(addresses[0], "10.244.0.200/28");
    assert!(
        addresses[1].starts_with("fd00:10::") && addresses[1].ends_with("/124"),
        "{addresses:?}"
    );
    assert_eq!(owner(&store, "10.244.0.192/28").as_deref(), Some("a"));
    let taken = ClusterPool::add(
        &call(Command::Add, "b", "c2", 1, &conf).with_args(&[("IP", "10.244.0.200")]),
        &mut store,
    )
    .unwrap_err();
    assert!(taken.msg.contains("held by"), "{taken:?}");
    let gateway = ClusterPool::add(
        &call(Command::Add, "b", "c3", 1, &conf).with_args(&[("IP", "10.244.0.193")]),
        &mut store,
    )
    .unwrap_err();
    assert_eq!(gateway.code, code::INVALID_NETWORK_CONFIG);
}

#[test]
fn a_full_pool_says_so_and_pools_count_blocks() {
    let conf = config(json!({"cidr": "10.9.0.0/27", "blockSize": 28}));
    let mut store = MemoryStore::default();
    for i in 0..26 {
        add(
            &mut store,
            if i % 2 == 0 { "a" } else { "b" },
            &format!("c{i}"),
            1,
            &conf,
        );
    }
    let err = ClusterPool::add(&call(Command::Add, "c", "full", 1, &conf), &mut store).unwrap_err();
    assert!(err.msg.contains("no free block"), "{err:?}");
    let rows = ClusterPool::pools(&Context::for_test("pods", Some(conf.clone())), &store).unwrap();
    let in_use: u64 = rows.iter().map(|r| r.in_use).sum();
    assert_eq!(in_use, 26);
    assert_eq!(rows.last().unwrap().free, Some(0), "{:?}", rows.last());
}

/// The operator's context, on live node `on`, at `now`.
fn operator(conf: &serde_json::Value, on: &str, now: u64) -> Context {
    Context::for_test("pods", Some(conf.clone()))
        .with_node_name(on)
        .with_now(now)
}

fn holders(store: &MemoryStore, conf: &serde_json::Value) -> Vec<(String, String)> {
    ClusterPool::allocations(&Context::for_test("pods", Some(conf.clone())), store)
        .unwrap()
        .into_iter()
        .map(|a| (a.container_id, a.address))
        .collect()
}

#[test]
fn release_node_frees_a_gone_nodes_addresses_and_blocks_at_once_and_leaves_the_others() {
    let conf = config(json!({}));
    let mut store = MemoryStore::default();
    let a = add(&mut store, "a", "a1", 1, &conf);
    let c1 = add(&mut store, "c", "c1", 1, &conf);
    let c2 = add(&mut store, "c", "c2", 1, &conf);
    let gone = block_of(&c1);
    let before = store.clone();

    // A dry run answers what would go and writes nothing.
    let dry = ClusterPool::release_node(&operator(&conf, "a", 5), "c", true, &mut store).unwrap();
    assert_eq!(store, before, "a dry run wrote nothing");
    let real = ClusterPool::release_node(&operator(&conf, "a", 5), "c", false, &mut store).unwrap();
    assert_eq!(dry, real, "the dry run said what the real one did");

    let bare = |cidr: &str| cidr.split('/').next().unwrap().to_string();
    let released: Vec<(&str, &str)> = real
        .addresses
        .iter()
        .map(|r| (r.container_id.as_str(), r.address.as_str()))
        .collect();
    let (c1, c2) = (bare(&c1), bare(&c2));
    assert_eq!(released, [("c1", c1.as_str()), ("c2", c2.as_str())]);
    assert_eq!(
        real.blocks,
        std::slice::from_ref(&gone),
        "freed without the grace"
    );
    assert!(real.notes.is_empty(), "{:?}", real.notes);
    assert_eq!(owner(&store, &gone), None);
    assert!(store.list("aff/c/").is_empty() && store.list("own/c/").is_empty());
    assert_eq!(holders(&store, &conf), [("a1".to_string(), bare(&a))]);
    assert_eq!(owner(&store, &block_of(&a)).as_deref(), Some("a"));

    // Released again: nothing left, not an error.
    let again =
        ClusterPool::release_node(&operator(&conf, "a", 6), "c", false, &mut store).unwrap();
    assert!(again.addresses.is_empty() && again.blocks.is_empty());
}

#[test]
fn a_gone_nodes_block_holding_another_nodes_pod_is_handed_to_that_node() {
    let conf = config(json!({"stickySeconds": 300}));
    let mut store = MemoryStore::default();
    let c = add(&mut store, "c", "c1", 1, &conf);
    let block = block_of(&c);
    // Node b's pod borrowed an address of c's block.
    let IpAddr::V4(network) = block.parse::<IpNet>().unwrap().network() else {
        unreachable!("an IPv4 pool")
    };
    let wanted = std::net::Ipv4Addr::from(u32::from(network) + 5).to_string();
    let borrowed = ClusterPool::add(
        &call(Command::Add, "b", "b1", 1, &conf).with_args(&[("IP", wanted.as_str())]),
        &mut store,
    )
    .unwrap();
    assert_eq!(block_of(&borrowed.ips[0].address), block);
    // A sticky pod of c's, deleted: its address is kept for it.
    let pod = [("K8S_POD_NAMESPACE", "db"), ("K8S_POD_NAME", "db-0")];
    let sticky = ClusterPool::add(
        &call(Command::Add, "c", "c2", 1, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    ClusterPool::del(
        &call(Command::Del, "c", "c2", 2, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();

    let report =
        ClusterPool::release_node(&operator(&conf, "a", 10), "c", false, &mut store).unwrap();
    assert!(report.blocks.is_empty(), "{report:?}");
    assert_eq!(report.addresses.len(), 1, "c1 only: c2 was deleted already");
    let sticky_ip = bare(&sticky.ips[0].address).to_string();
    assert_eq!(
        report.notes,
        [
            format!(
                "address {sticky_ip} stays kept for pod db/db-0 until 302 (Unix seconds), in block {block}, now node b's"
            ),
            format!(
                "block {block} is handed to node b, not freed: it holds 1 address(es) of live pods; b frees it once it is empty"
            ),
        ]
    );
    assert_eq!(owner(&store, &block).as_deref(), Some("b"));
    assert!(store.get(&format!("aff/b/{block}")).is_some());
    assert!(store.list("aff/c/").is_empty());
    // b's pod keeps its address, no longer borrowed: the block is b's.
    assert!(holders(&store, &conf).contains(&("b1".to_string(), wanted)));
    let listed = ClusterPool::allocations(&operator(&conf, "a", 11), &store).unwrap();
    assert!(
        listed
            .iter()
            .all(|a| !a.attributes.iter().any(|(k, _)| k == "borrowed")),
        "{listed:?}"
    );
    // The sticky pod gets its own back on node b, from b's own block now.
    let back = ClusterPool::add(
        &call(Command::Add, "b", "c3", 20, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    assert_eq!(bare(&back.ips[0].address), sticky_ip);
    assert!(!back.ips[0].address.ends_with("/32"), "{back:?}");
    // Once empty, the block goes by its new node's grace rule.
    del(&mut store, "b", "b1", 30, &conf);
    ClusterPool::del(
        &call(Command::Del, "b", "c3", 30, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    del(&mut store, "b", "nothing", 400, &conf);
    assert_eq!(
        owner(&store, &block).as_deref(),
        Some("b"),
        "within the grace"
    );
    del(&mut store, "b", "nothing", 460, &conf);
    assert_eq!(owner(&store, &block), None);
}

#[test]
fn a_gone_nodes_block_goes_only_where_max_blocks_per_node_allows() {
    // Every node holds its one block: nobody may take c's.
    let conf = config(json!({"stickySeconds": 300, "maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    let c = add(&mut store, "c", "c1", 1, &conf);
    add(&mut store, "a", "a1", 1, &conf);
    let b_own = add(&mut store, "b", "b0", 1, &conf);
    assert_ne!(block_of(&b_own), block_of(&c));
    let block = block_of(&c);
    let IpAddr::V4(network) = block.parse::<IpNet>().unwrap().network() else {
        unreachable!("an IPv4 pool")
    };
    let wanted = std::net::Ipv4Addr::from(u32::from(network) + 5).to_string();
    ClusterPool::add(
        &call(Command::Add, "b", "b1", 1, &conf).with_args(&[("IP", wanted.as_str())]),
        &mut store,
    )
    .unwrap();
    let pod = [("K8S_POD_NAMESPACE", "db"), ("K8S_POD_NAME", "db-0")];
    let sticky = ClusterPool::add(
        &call(Command::Add, "c", "c2", 1, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();
    ClusterPool::del(
        &call(Command::Del, "c", "c2", 2, &conf).with_args(&pod),
        &mut store,
    )
    .unwrap();

    let report =
        ClusterPool::release_node(&operator(&conf, "a", 10), "c", false, &mut store).unwrap();
    let sticky_ip = bare(&sticky.ips[0].address).to_string();
    assert_eq!(
        report.notes,
        [
            format!(
                "address {sticky_ip}, kept for pod db/db-0, is released: no node may take block {block} within maxBlocksPerNode, so the pod gets a new address at its next ADD"
            ),
            format!(
                "block {block} stays node c's: 1 address(es) of live pods of node(s) b keep it, and each of those nodes and a holds its maxBlocksPerNode blocks; run release-node again once they are deleted"
            ),
        ]
    );
    assert_eq!(owner(&store, &block).as_deref(), Some("c"));
    for node in ["a", "b"] {
        assert_eq!(
            store.list(&format!("aff/{node}/")).len(),
            1,
            "{node} stays within its limit"
        );
    }
    assert!(store.get("sticky/db/db-0").is_none());
    // Once b's pod is deleted, releasing c again frees the block.
    del(&mut store, "b", "b1", 20, &conf);
    let again =
        ClusterPool::release_node(&operator(&conf, "a", 21), "c", false, &mut store).unwrap();
    assert_eq!(again.blocks, std::slice::from_ref(&block), "{again:?}");
    assert_eq!(owner(&store, &block), None);
}

#[test]
fn release_node_refuses_the_node_it_runs_on_and_a_network_without_configuration() {
    let conf = config(json!({}));
    let mut store = MemoryStore::default();
    add(&mut store, "a", "a1", 1, &conf);
    let err =
        ClusterPool::release_node(&operator(&conf, "a", 5), "a", false, &mut store).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
    assert!(err.msg.contains("cannot release itself"), "{}", err.msg);
    let bare = Context::for_test("pods", None).with_node_name("b");
    let err = ClusterPool::release_node(&bare, "a", false, &mut store).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
    assert_eq!(holders(&store, &conf).len(), 1);
}

/// Two tenants' pools and a default, each a /24 in /28 blocks.
fn tenants(default: bool) -> serde_json::Value {
    let mut pools = vec![
        json!({"name": "team-a", "cidr": "10.81.0.0/24", "namespaces": ["team-a", "team-a-ci"]}),
        json!({"name": "team-b", "cidr": ["10.82.0.0/24"], "namespaces": ["team-b"]}),
    ];
    if default {
        pools.push(
            json!({"name": "default", "cidr": ["10.80.0.0/24", "fd80::/120"], "default": true}),
        );
    }
    json!({"cniVersion": "1.1.0", "name": "pods", "ipam": {"pools": pools, "blockSize": 28, "blockSizeV6": 124}})
}

fn add_in(
    store: &mut MemoryStore,
    conf: &serde_json::Value,
    id: &str,
    args: &[(&str, &str)],
) -> Result<IpamResult, Error> {
    ClusterPool::add(&call(Command::Add, "a", id, 1, conf).with_args(args), store)
}

#[test]
fn a_pod_draws_from_its_namespaces_pool_else_the_default() {
    let conf = tenants(true);
    let mut store = MemoryStore::default();
    let ns = |n| [("K8S_POD_NAMESPACE", n), ("K8S_POD_NAME", "p")];
    let a = add_in(&mut store, &conf, "c1", &ns("team-a-ci")).unwrap();
    let b = add_in(&mut store, &conf, "c2", &ns("team-b")).unwrap();
    let other = add_in(&mut store, &conf, "c3", &ns("web")).unwrap();
    let none = add_in(&mut store, &conf, "c4", &[]).unwrap();
    assert!(a.ips[0].address.starts_with("10.81.0."), "{a:?}");
    assert_eq!(a.ips.len(), 1, "team-a has IPv4 only");
    assert!(b.ips[0].address.starts_with("10.82.0."), "{b:?}");
    for default in [&other, &none] {
        let addresses: Vec<&str> = default.ips.iter().map(|i| i.address.as_str()).collect();
        assert!(
            addresses[0].starts_with("10.80.0.") && addresses[1].starts_with("fd80::"),
            "{addresses:?}"
        );
    }
    // list names each allocation's pool; stats has a row per pool and family.
    let context = Context::for_test("pods", Some(conf.clone()));
    let listed: Vec<(String, String)> = ClusterPool::allocations(&context, &store)
        .unwrap()
        .into_iter()
        .map(|a| {
            let pool = a.attributes.iter().find(|(k, _)| k == "pool").unwrap();
            (a.container_id, pool.1.clone())
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("c1", "team-a"),
            ("c2", "team-b"),
            ("c3", "default"),
            ("c3", "default"),
            ("c4", "default"),
            ("c4", "default")
        ]
        .map(|(c, p)| (c.to_string(), p.to_string()))
    );
    let rows: Vec<(String, u64, Option<u64>)> = ClusterPool::pools(&context, &store)
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.in_use, r.capacity))
        .collect();
    assert_eq!(
        rows,
        [
            ("pool team-a 10.81.0.0/24", 1, Some(16 * 13)),
            ("pool team-b 10.82.0.0/24", 1, Some(16 * 13)),
            ("pool default 10.80.0.0/24", 2, Some(16 * 13)),
            ("pool default fd80::/120", 2, Some(16 * 13)),
        ]
        .map(|(n, u, c)| (n.to_string(), u, c))
    );
}

#[test]
fn the_pod_annotation_then_ipam_pool_override_the_namespace() {
    let conf = tenants(true);
    let mut store = MemoryStore::default();
    let ns = ("K8S_POD_NAMESPACE", "team-a");
    let by_arg = add_in(&mut store, &conf, "c1", &[ns, ("IPAM_POOL", "team-b")]).unwrap();
    assert!(by_arg.ips[0].address.starts_with("10.82.0."), "{by_arg:?}");
    let mut annotated = conf.clone();
    annotated["runtimeConfig"] =
        json!({"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/pool": "default"}});
    let by_annotation =
        add_in(&mut store, &annotated, "c2", &[ns, ("IPAM_POOL", "team-b")]).unwrap();
    assert!(
        by_annotation.ips[0].address.starts_with("10.80.0."),
        "the annotation wins over IPAM_POOL: {by_annotation:?}"
    );
    // A pool nobody configured: 141, naming it and where it came from.
    let err = add_in(&mut store, &conf, "c3", &[ns, ("IPAM_POOL", "team-z")]).unwrap_err();
    assert_eq!(err.code, codes::UNKNOWN_POOL);
    assert!(
        err.msg.contains("CNI_ARGS IPAM_POOL names pool \"team-z\""),
        "{}",
        err.msg
    );
    // A requested address must lie in the pod's pool.
    let err = add_in(&mut store, &conf, "c4", &[ns, ("IP", "10.82.0.20")]).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
    assert!(err.msg.contains("not in pool \"team-a\""), "{}", err.msg);
}

#[test]
fn an_unmapped_namespace_without_a_default_pool_is_refused() {
    let conf = tenants(false);
    let mut store = MemoryStore::default();
    let err = add_in(&mut store, &conf, "c1", &[("K8S_POD_NAMESPACE", "web")]).unwrap_err();
    assert_eq!(err.code, codes::NO_POOL);
    assert!(err.msg.contains("namespace \"web\""), "{}", err.msg);
    let err = add_in(&mut store, &conf, "c2", &[]).unwrap_err();
    assert_eq!(err.code, codes::NO_POOL);
    assert!(store.list("").is_empty(), "nothing written");
}

#[test]
fn pools_that_would_make_a_choice_ambiguous_are_refused() {
    let bad = [
        json!({"cidr": "10.0.0.0/24", "pools": [{"name": "a", "cidr": "10.1.0.0/24"}]}),
        json!({"pools": []}),
        json!({"pools": [{"name": "a", "cidr": "10.1.0.0/16"}, {"name": "b", "cidr": "10.1.2.0/24"}]}),
        json!({"pools": [{"name": "a", "cidr": "10.1.0.0/24"}, {"name": "a", "cidr": "10.2.0.0/24"}]}),
        json!({"pools": [{"name": "a", "cidr": "10.1.0.0/24", "default": true}, {"name": "b", "cidr": "10.2.0.0/24", "default": true}]}),
        json!({"pools": [{"name": "a", "cidr": "10.1.0.0/24", "namespaces": ["x"]}, {"name": "b", "cidr": "10.2.0.0/24", "namespaces": ["x"]}]}),
        json!({"pools": [{"name": "a/b", "cidr": "10.1.0.0/24"}]}),
        json!({"pools": [{"name": "a", "cidr": "10.1.0.0/24", "namespace": ["x"]}]}),
    ];
    for ipam in bad {
        let conf = json!({"cniVersion": "1.1.0", "name": "pods", "ipam": ipam});
        let err = add_in(&mut MemoryStore::default(), &conf, "c1", &[]).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG, "{ipam}: {err:?}");
    }
}

#[test]
fn under_ptp_a_borrowed_address_is_answered_with_its_block_prefix_and_gateway() {
    // ptp routes each pod through its own host veth: nothing is on-link, and it refuses
    // a host prefix (it deletes the on-link route an address adds, which a /32 has not).
    let mut conf = config(json!({"cidr": "10.9.0.0/27", "maxBlocksPerNode": 1}));
    conf["type"] = json!("ptp");
    let mut store = MemoryStore::default();
    let b0 = add(&mut store, "b", "b0", 1, &conf);
    let lender = block_of_in(&b0, "10.9.0.0/27");
    for i in 0..13 {
        add(&mut store, "a", &format!("a{i}"), 1, &conf);
    }
    let result = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap();
    let ip = &result.ips[0];
    assert_eq!(block_of_in(&ip.address, "10.9.0.0/27"), lender, "{ip:?}");
    assert!(ip.address.ends_with("/28"), "the block's prefix: {ip:?}");
    let range = Range::new("10.9.0.0/27".parse().unwrap(), 28).unwrap();
    assert_eq!(
        ip.gateway.clone().unwrap(),
        range.gateway(lender.parse().unwrap()).to_string(),
        "the lender block's gateway"
    );
    assert!(result.routes.is_empty(), "no link route: {result:?}");
}

#[test]
fn a_node_at_its_block_limit_borrows_from_another_nodes_block() {
    // Two /28 blocks of 13 usable addresses; one block per node.
    let conf = config(json!({"cidr": "10.9.0.0/27", "maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    let b0 = add(&mut store, "b", "b0", 1, &conf);
    let lender = block_of_in(&b0, "10.9.0.0/27");
    let a: Vec<String> = (0..13)
        .map(|i| add(&mut store, "a", &format!("a{i}"), 1, &conf))
        .collect();
    assert!(a.iter().all(|ip| ip.ends_with("/28")));
    let result = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap();
    let ip = &result.ips[0];
    assert_eq!(block_of_in(&ip.address, "10.9.0.0/27"), lender, "{ip:?}");
    assert!(ip.address.ends_with("/32"), "a host prefix: {ip:?}");
    let gateway = ip.gateway.clone().unwrap();
    let range = Range::new("10.9.0.0/27".parse().unwrap(), 28).unwrap();
    assert_eq!(
        gateway,
        range.gateway(lender.parse().unwrap()).to_string(),
        "the lender block's gateway"
    );
    assert_eq!(result.routes.len(), 1, "{result:?}");
    assert_eq!(result.routes[0].dst, format!("{gateway}/32"));
    assert_eq!(result.routes[0].scope, Some(LINK_SCOPE));
    assert_eq!(result.routes[0].gw, None);
    // The same ADD again answers the same result; the block stays node b's.
    let again = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap();
    assert_eq!(again, result);
    assert_eq!(owner(&store, &lender).as_deref(), Some("b"));
    assert_eq!(store.list("aff/a/").len(), 1, "still one block of a's");
    let context = Context::for_test("pods", Some(conf.clone()));
    let borrowed: Vec<String> = ClusterPool::allocations(&context, &store)
        .unwrap()
        .into_iter()
        .filter(|a| a.attributes.contains(&("borrowed".into(), "yes".into())))
        .map(|a| a.container_id)
        .collect();
    assert_eq!(borrowed, ["a13"]);
    // Its DEL gives it back to b's block.
    del(&mut store, "a", "a13", 2, &conf);
    let lent = read::<Block>(&store, &format!("blk/{lender}"))
        .unwrap()
        .unwrap();
    assert_eq!(lent.ips.len(), 1, "only b0 left");
}

#[test]
fn with_strict_affinity_a_node_that_would_borrow_fails() {
    let conf =
        config(json!({"cidr": "10.9.0.0/27", "maxBlocksPerNode": 1, "strictAffinity": true}));
    let mut store = MemoryStore::default();
    add(&mut store, "b", "b0", 1, &conf);
    for i in 0..13 {
        add(&mut store, "a", &format!("a{i}"), 1, &conf);
    }
    let before = store.clone();
    let err = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::BLOCK_LIMIT);
    assert!(
        err.msg.contains("maxBlocksPerNode") && err.msg.contains("strictAffinity"),
        "{}",
        err.msg
    );
    assert_eq!(store, before, "nothing written");
    // Without a limit but with no free block left, strict affinity refuses too.
    let conf = config(json!({"cidr": "10.9.0.0/28", "strictAffinity": true}));
    let mut store = MemoryStore::default();
    add(&mut store, "b", "b0", 1, &conf);
    let err = ClusterPool::add(&call(Command::Add, "a", "a0", 1, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::BLOCK_LIMIT);
    assert!(err.msg.contains("no free block"), "{}", err.msg);
    // A requested address in an unclaimed block past the limit is refused.
    let conf = config(json!({"cidr": "10.9.0.0/26", "maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    let mine = add(&mut store, "a", "a0", 1, &conf);
    let elsewhere = if mine.starts_with("10.9.0.2/") {
        "10.9.0.50"
    } else {
        "10.9.0.2"
    };
    let err = ClusterPool::add(
        &call(Command::Add, "a", "a1", 1, &conf).with_args(&[("IP", elsewhere)]),
        &mut store,
    )
    .unwrap_err();
    assert_eq!(err.code, codes::BLOCK_LIMIT, "{err:?}");
}

#[test]
fn with_strict_affinity_a_requested_address_in_another_nodes_block_is_refused() {
    let conf = config(json!({"cidr": "10.9.0.0/26", "strictAffinity": true}));
    let mut store = MemoryStore::default();
    let b0 = add(&mut store, "b", "b0", 1, &conf);
    // The next address of b's block, free but b's.
    let wanted = bare(&b0).parse::<std::net::Ipv4Addr>().unwrap();
    let wanted = std::net::Ipv4Addr::from(u32::from(wanted) + 1).to_string();
    let before = store.clone();
    let err = ClusterPool::add(
        &call(Command::Add, "a", "a0", 1, &conf).with_args(&[("IP", wanted.as_str())]),
        &mut store,
    )
    .unwrap_err();
    assert_eq!(err.code, codes::BLOCK_LIMIT, "{err:?}");
    assert!(
        err.msg
            .contains(&format!("requested address {wanted} is in block"))
            && err.msg.contains("of node b")
            && err.msg.contains("strictAffinity"),
        "{}",
        err.msg
    );
    assert_eq!(store, before, "nothing written");
    // Without strictAffinity it is borrowed.
    let loose = config(json!({"cidr": "10.9.0.0/26"}));
    let got = ClusterPool::add(
        &call(Command::Add, "a", "a0", 1, &loose).with_args(&[("IP", wanted.as_str())]),
        &mut store,
    )
    .unwrap();
    assert_eq!(bare(&got.ips[0].address), wanted);
}

#[test]
fn with_strict_affinity_a_sticky_pod_on_another_node_gets_a_local_address_and_its_hold_goes() {
    let conf = config(json!({"cidr": "10.9.0.0/26", "strictAffinity": true, "stickySeconds": 600}));
    let mut store = MemoryStore::default();
    let sticky = |node: &str, at: u64, command: Command| {
        call(command, node, "web-0", at, &conf)
            .with_args(&[("K8S_POD_NAMESPACE", "web"), ("K8S_POD_NAME", "web-0")])
    };
    let first = ClusterPool::add(&sticky("b", 1, Command::Add), &mut store).unwrap();
    let first = bare(&first.ips[0].address).to_string();
    ClusterPool::del(&sticky("b", 2, Command::Del), &mut store).unwrap();
    assert_eq!(store.list("sticky/").len(), 1, "kept for web-0");
    // Rescheduled to node a, within its time: a's own block, not b's kept address.
    let moved = ClusterPool::add(&sticky("a", 3, Command::Add), &mut store).unwrap();
    let moved = bare(&moved.ips[0].address).to_string();
    assert_ne!(moved, first);
    assert!(store.list("sticky/").is_empty(), "the hold's record went");
    let b_block = store
        .list("blk/")
        .into_iter()
        .map(|(_, v)| serde_json::from_slice::<serde_json::Value>(&v).unwrap())
        .find(|b| b["node"] == "b")
        .unwrap();
    assert!(
        b_block["ips"].as_object().unwrap().is_empty(),
        "b's block no longer holds {first}: {b_block}"
    );
    // Without strictAffinity the pod takes its kept address back, borrowed.
    let loose = config(json!({"cidr": "10.9.0.0/26", "stickySeconds": 600}));
    let mut store = MemoryStore::default();
    let again = |node: &str, at: u64, command: Command| {
        call(command, node, "web-0", at, &loose)
            .with_args(&[("K8S_POD_NAMESPACE", "web"), ("K8S_POD_NAME", "web-0")])
    };
    let first = ClusterPool::add(&again("b", 1, Command::Add), &mut store).unwrap();
    ClusterPool::del(&again("b", 2, Command::Del), &mut store).unwrap();
    let back = ClusterPool::add(&again("a", 3, Command::Add), &mut store).unwrap();
    assert_eq!(bare(&back.ips[0].address), bare(&first.ips[0].address));
}

#[test]
fn a_free_address_in_any_claimed_block_is_borrowed_however_many_blocks_are_full() {
    // 64 blocks of 5 addresses, every one claimed and full: node x at its limit.
    let conf = config(json!({"cidr": "10.9.0.0/23", "blockSize": 29, "maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    let nodes: Vec<String> = (0..63).map(|n| format!("n{n}")).collect();
    for node in nodes.iter().map(String::as_str).chain(["x"]) {
        for i in 0..5 {
            add(&mut store, node, &format!("{node}-{i}"), 1, &conf);
        }
    }
    let free = |store: &MemoryStore| {
        ClusterPool::pools(&Context::for_test("pods", Some(conf.clone())), store).unwrap()[0].free
    };
    assert_eq!(free(&store), Some(0));
    // One address freed in each block in turn (more than one borrow's reads beyond
    // where x starts looking, whatever that is): x's next ADD gets exactly it.
    for (n, node) in nodes.iter().enumerate() {
        let freed = {
            let pod = format!("{node}-0");
            let own = store.get(&format!("own/{node}/{pod}/eth0")).unwrap();
            let own: serde_json::Value = serde_json::from_slice(&own).unwrap();
            del(&mut store, node, &pod, 2, &conf);
            own["ips"][0].as_str().unwrap().to_string()
        };
        assert_eq!(free(&store), Some(1), "stats say one is free");
        let got = add(&mut store, "x", &format!("x-b{n}"), 2, &conf);
        assert_eq!(bare(&got), freed, "block of {node}");
        assert_eq!(free(&store), Some(0));
    }
    let err =
        ClusterPool::add(&call(Command::Add, "x", "x-last", 3, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::EXHAUSTED);
}

#[test]
fn a_node_with_no_free_block_borrows_until_the_pool_is_exhausted() {
    let conf = config(json!({"cidr": "10.9.0.0/28"}));
    let mut store = MemoryStore::default();
    add(&mut store, "b", "b0", 1, &conf);
    let borrowed: Vec<String> = (0..12)
        .map(|i| add(&mut store, "a", &format!("a{i}"), 1, &conf))
        .collect();
    assert!(
        borrowed.iter().all(|ip| ip.ends_with("/32")),
        "{borrowed:?}"
    );
    assert!(store.list("aff/a/").is_empty(), "a claimed nothing");
    let _ = wasm_ipam_guest::readiness::last_reported();
    let err = ClusterPool::add(&call(Command::Add, "a", "a12", 1, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::EXHAUSTED);
    assert!(err.msg.contains("exhausted"), "{}", err.msg);
    // STATUS learns it from the ADD (degraded, still ready); a DEL clears it.
    assert_eq!(
        wasm_ipam_guest::readiness::last_reported(),
        Some(vec![err.clone()])
    );
    let rows = ClusterPool::pools(&Context::for_test("pods", Some(conf.clone())), &store).unwrap();
    assert_eq!((rows[0].in_use, rows[0].free), (13, Some(0)), "{rows:?}");
    del(&mut store, "a", "a0", 2, &conf);
    assert_eq!(wasm_ipam_guest::readiness::last_reported(), Some(vec![]));
}

/// The block of `cidr`'s address in `range` cut into /28s.
fn block_of_in(cidr: &str, range: &str) -> String {
    Range::new(range.parse().unwrap(), 28)
        .unwrap()
        .block_of(bare(cidr).parse().unwrap())
        .unwrap()
        .to_string()
}

fn usage_row(store: &MemoryStore, conf: &serde_json::Value, name: &str) -> PoolUsage {
    ClusterPool::usage(&operator(conf, "a", 1), store)
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

#[test]
fn a_reservation_is_never_handed_out_until_it_is_ended() {
    // One /28 block of 13 usable addresses: .2 to .14.
    let conf = config(json!({"cidr": "10.244.0.0/28"}));
    let ctx = operator(&conf, "a", 1);
    let mut store = MemoryStore::default();
    let first = add(&mut store, "a", "c0", 1, &conf);
    assert_eq!(first, "10.244.0.2/28");
    // In use: refused without --force, which keeps it out of use after its DEL.
    let err = ClusterPool::reserve(&ctx, "10.244.0.2", "vip", false, &mut store).unwrap_err();
    assert_eq!(err.code, codes::IN_USE, "{}", err.msg);
    let made = ClusterPool::reserve(&ctx, "10.244.0.2", "vip", true, &mut store).unwrap();
    assert_eq!((made.cidr.as_str(), made.held.len()), ("10.244.0.2/32", 1));
    ClusterPool::reserve(&ctx, "10.244.0.4/30", "migrating", false, &mut store).unwrap();
    del(&mut store, "a", "c0", 2, &conf);
    // 13 usable, 5 reserved (.2, .4-.7): 8 ADDs on either node, none reserved.
    let got: Vec<String> = (0..8)
        .map(|i| {
            add(
                &mut store,
                if i % 2 == 0 { "a" } else { "b" },
                &format!("p{i}"),
                3,
                &conf,
            )
        })
        .collect();
    for ip in &got {
        let ip: IpAddr = bare(ip).parse().unwrap();
        assert!(
            ![
                "10.244.0.2",
                "10.244.0.4",
                "10.244.0.5",
                "10.244.0.6",
                "10.244.0.7"
            ]
            .contains(&ip.to_string().as_str()),
            "{got:?}"
        );
    }
    let full = ClusterPool::add(&call(Command::Add, "a", "p8", 3, &conf), &mut store).unwrap_err();
    assert_eq!(full.code, codes::EXHAUSTED, "{}", full.msg);
    // A request for a reserved address is refused.
    let asked = call(Command::Add, "a", "p9", 3, &conf).with_args(&[("IP", "10.244.0.5")]);
    let err = ClusterPool::add(&asked, &mut store).unwrap_err();
    assert_eq!(err.code, codes::RESERVED, "{}", err.msg);
    let row = usage_row(&store, &conf, "pool default 10.244.0.0/28");
    assert_eq!(
        (row.capacity, row.in_use, row.reserved, row.free),
        (Some(13), 8, 5, Some(0))
    );
    let listed = ClusterPool::reservations(&ctx, &store).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].note, "migrating");
    // Ended: usable again.
    let err = ClusterPool::unreserve(&ctx, "10.244.0.3", &mut store).unwrap_err();
    assert_eq!(err.code, codes::NOT_RESERVED);
    ClusterPool::unreserve(&ctx, "10.244.0.4/30", &mut store).unwrap();
    let next = add(&mut store, "a", "p10", 4, &conf);
    assert!(
        [
            "10.244.0.4/28",
            "10.244.0.5/28",
            "10.244.0.6/28",
            "10.244.0.7/28"
        ]
        .contains(&next.as_str()),
        "{next}"
    );
    // Outside every pool, or not an address: refused.
    let err = ClusterPool::reserve(&ctx, "10.9.0.1", "", false, &mut store).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
}

#[test]
fn usage_counts_borrowed_addresses_and_shows_blocks_with_their_nodes() {
    let conf = config(json!({"maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    for i in 0..13 {
        add(&mut store, "a", &format!("a{i}"), 1, &conf);
    }
    add(&mut store, "b", "b0", 1, &conf);
    let borrowed = add(&mut store, "a", "a13", 1, &conf);
    assert!(borrowed.ends_with("/32"), "{borrowed}");
    let pool = usage_row(&store, &conf, "pool default 10.244.0.0/24");
    assert_eq!((pool.in_use, pool.borrowed), (15, 1));
    let lender = usage_row(&store, &conf, &block_of(&borrowed));
    assert_eq!(lender.kind, UsageKind::Block);
    assert_eq!(lender.node.as_deref(), Some("b"));
    assert_eq!(lender.parent.as_deref(), Some("pool default 10.244.0.0/24"));
    assert_eq!((lender.in_use, lender.borrowed), (2, 1));
}

#[test]
fn each_node_publishes_its_use_and_the_call_past_warn_percent_records_it_once() {
    // 16 blocks of 13: 208 addresses; 10% is 20.8, so the 21st address crosses.
    let conf = config(json!({"warnPercent": 10}));
    let mut store = MemoryStore::default();
    for i in 0..20 {
        let node = if i % 2 == 0 { "a" } else { "b" };
        add(&mut store, node, &format!("p{i}"), 1, &conf);
    }
    assert!(store.get("warn/10.244.0.0/24").is_none());
    assert_eq!(
        store.get_string("use/10.244.0.0/24/a").as_deref(),
        Some("10")
    );
    add(&mut store, "c", "p20", 1, &conf);
    assert!(store.get("warn/10.244.0.0/24").is_some(), "past 10%");
    assert_eq!(
        usage_row(&store, &conf, "pool default 10.244.0.0/24").warn_percent,
        Some(10)
    );
    // Back under: the record goes, so the next crossing warns again.
    del(&mut store, "c", "p20", 2, &conf);
    assert!(store.get("warn/10.244.0.0/24").is_none());
    assert_eq!(
        store.get_string("use/10.244.0.0/24/c").as_deref(),
        Some("0")
    );
    let bad = config(json!({"warnPercent": 0}));
    let err = ClusterPool::add(&call(Command::Add, "a", "x", 1, &bad), &mut store).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
}

#[test]
fn the_call_that_brings_a_range_to_its_warn_percent_says_it_reached_it() {
    // Two blocks of 13: 26 addresses, and 50% of them is 13.
    let unwatched = config(json!({"cidr": "10.244.0.0/27"}));
    let watched = config(json!({"cidr": "10.244.0.0/27", "warnPercent": 50}));
    let conf = Conf::of(&call(Command::Add, "a", "x", 1, &watched)).unwrap();
    let range: IpNet = "10.244.0.0/27".parse().unwrap();
    let mut store = MemoryStore::default();
    for i in 0..12 {
        add(&mut store, "a", &format!("p{i}"), 1, &unwatched);
    }
    // What the 12th and the 13th ADD of the watched network log.
    assert_eq!(
        usage::account(&mut store, &conf, "a", &[range]).unwrap(),
        Vec::<String>::new()
    );
    add(&mut store, "a", "p12", 1, &unwatched);
    assert_eq!(
        usage::account(&mut store, &conf, "a", &[range]).unwrap(),
        ["pool default 10.244.0.0/27: 13 of 26 addresses in use (50%), reached its warnPercent 50"]
    );
    del(&mut store, "a", "p12", 2, &unwatched);
    assert_eq!(
        usage::account(&mut store, &conf, "a", &[range]).unwrap(),
        [
            "pool default 10.244.0.0/27: 12 of 26 addresses in use (46%), back under its warnPercent 50"
        ]
    );
}

#[test]
fn blocks_wholly_reserved_are_skipped_even_when_they_are_most_of_a_wide_range() {
    // A /48 of /122 blocks: 2^74 of them; all but the last /64 reserved.
    let conf = config(json!({"cidr": "fd80::/48", "blockSizeV6": 122}));
    let ctx = operator(&conf, "a", 1);
    let mut store = MemoryStore::default();
    for net in ["fd80::/49", "fd80:0:0:8000::/50", "fd80:0:0:c000::/51"] {
        ClusterPool::reserve(&ctx, net, "", false, &mut store).unwrap();
    }
    let got = add(&mut store, "a", "c1", 1, &conf);
    let ip: std::net::Ipv6Addr = bare(&got).parse().unwrap();
    assert!(
        ip.segments()[3] >= 0xe000,
        "outside every reservation: {got}"
    );
}

#[test]
fn a_range_keeps_at_most_its_limit_of_reservations() {
    let conf = config(json!({"cidr": "10.244.0.0/16"}));
    let ctx = operator(&conf, "a", 1);
    let mut store = MemoryStore::default();
    for i in 0..reserve::MAX_PER_RANGE {
        let address = format!("10.244.{}.{}", i / 200, 2 + i % 200);
        ClusterPool::reserve(&ctx, &address, "", false, &mut store).unwrap();
    }
    let err = ClusterPool::reserve(&ctx, "10.244.9.9", "", false, &mut store).unwrap_err();
    assert_eq!(err.code, code::INVALID_NETWORK_CONFIG, "{}", err.msg);
    assert!(err.msg.contains("the most one range keeps"), "{}", err.msg);
    // Reserving one again only updates its note.
    let again = ClusterPool::reserve(&ctx, "10.244.0.2", "new note", false, &mut store).unwrap();
    assert_eq!(again.note, "new note");
    assert_eq!(
        ClusterPool::reservations(&ctx, &store).unwrap().len(),
        reserve::MAX_PER_RANGE
    );
}

#[test]
fn only_pods_with_an_ordinal_are_sticky_by_default_and_the_annotation_decides_first() {
    assert!(has_ordinal("db-0") && has_ordinal("web-12") && has_ordinal("a-b-3"));
    for name in ["web-7c9f8d6b5-x2k4q", "db", "db-", "-1", "db-01", "db-1a"] {
        assert!(!has_ordinal(name), "{name}");
    }
    let pools = json!([
        {"name": "sts", "cidr": "10.9.0.0/24", "default": true},
        {"name": "vms", "cidr": "10.9.1.0/24", "namespaces": ["vms"], "stickyPods": "annotated", "stickySeconds": 60},
        {"name": "none", "cidr": "10.9.2.0/24", "namespaces": ["plain"], "stickySeconds": 0}
    ]);
    let conf = json!({"cniVersion": "1.1.0", "name": "pods", "ipam": {"pools": pools, "stickySeconds": 300}});
    let kept_as = |namespace: &str, name: &str, annotation: Option<&str>| {
        let mut conf = conf.clone();
        if let Some(value) = annotation {
            conf["runtimeConfig"] =
                json!({"io.kubernetes.cri.pod-annotations": {STICKY_ANNOTATION: value}});
        }
        let request = call(Command::Add, "a", "c", 1, &conf)
            .with_args(&[("K8S_POD_NAMESPACE", namespace), ("K8S_POD_NAME", name)]);
        let parsed = Conf::of(&request).unwrap();
        let pool = select::pool_for(&parsed, &request).unwrap();
        identity(&request, pool)
    };
    assert_eq!(
        kept_as("web", "db-0", None).unwrap().as_deref(),
        Some("web/db-0")
    );
    assert_eq!(kept_as("web", "web-7c9f8d6b5-x2k4q", None).unwrap(), None);
    assert_eq!(
        kept_as("web", "web-7c9f8d6b5-x2k4q", Some("true"))
            .unwrap()
            .as_deref(),
        Some("web/web-7c9f8d6b5-x2k4q")
    );
    assert_eq!(kept_as("web", "db-0", Some("false")).unwrap(), None);
    // A pool of VMs keeps only annotated pods, under the name the annotation gives.
    assert_eq!(kept_as("vms", "db-0", None).unwrap(), None);
    assert_eq!(
        kept_as("vms", "virt-launcher-vm1-abcde", Some("vm1"))
            .unwrap()
            .as_deref(),
        Some("vms/vm1")
    );
    assert_eq!(
        kept_as("vms", "x", Some("a/b")).unwrap_err().code,
        code::INVALID_NETWORK_CONFIG
    );
    // A pool that keeps nothing keeps nothing, annotated or not.
    assert_eq!(kept_as("plain", "db-0", Some("true")).unwrap(), None);
}

#[test]
fn a_deployments_pods_free_their_address_at_del_and_a_statefulsets_keep_it() {
    let conf = config(json!({"cidr": "10.9.0.0/27", "blockSize": 28, "stickySeconds": 600}));
    let mut store = MemoryStore::default();
    let pod = |name: &str, command: Command, at: u64| {
        call(command, "a", name, at, &conf)
            .with_args(&[("K8S_POD_NAMESPACE", "web"), ("K8S_POD_NAME", name)])
    };
    let web = bare(
        &ClusterPool::add(&pod("web-5d9c7b-x2k4q", Command::Add, 1), &mut store)
            .unwrap()
            .ips[0]
            .address,
    )
    .to_string();
    let db = bare(
        &ClusterPool::add(&pod("db-0", Command::Add, 1), &mut store)
            .unwrap()
            .ips[0]
            .address,
    )
    .to_string();
    ClusterPool::del(&pod("web-5d9c7b-x2k4q", Command::Del, 2), &mut store).unwrap();
    ClusterPool::del(&pod("db-0", Command::Del, 2), &mut store).unwrap();
    assert_eq!(
        store.list("sticky/").len(),
        1,
        "only db-0's addresses are kept"
    );
    let rows = ClusterPool::pools(&Context::for_test("pods", Some(conf.clone())), &store).unwrap();
    assert_eq!(rows[0].cooling_down, 1, "{rows:?}");
    // The Deployment's address is free for the next pod; db-0 gets its own back.
    let next = bare(
        &ClusterPool::add(&pod("web-5d9c7b-q7w8e", Command::Add, 3), &mut store)
            .unwrap()
            .ips[0]
            .address,
    )
    .to_string();
    assert_eq!(next, web);
    let back = ClusterPool::add(&pod("db-0", Command::Add, 3), &mut store).unwrap();
    assert_eq!(bare(&back.ips[0].address), db);
}

#[test]
fn a_pod_annotation_asks_for_fixed_addresses_and_each_refusal_names_the_address() {
    let conf = config(json!({"cidr": "10.9.0.0/26"}));
    let annotated = |ips: &str| {
        let mut c = conf.clone();
        c["runtimeConfig"] =
            json!({"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/ip-addrs": ips}});
        c
    };
    let mut store = MemoryStore::default();
    let vm = annotated(r#"["10.9.0.20"]"#);
    let got = ClusterPool::add(&call(Command::Add, "a", "vm-1", 1, &vm), &mut store).unwrap();
    assert_eq!(bare(&got.ips[0].address), "10.9.0.20");
    // Taken: the next pod asking for it is told who holds it.
    let err = ClusterPool::add(&call(Command::Add, "a", "other", 1, &vm), &mut store).unwrap_err();
    assert!(
        err.msg
            .contains("requested address 10.9.0.20 is held by container \"vm-1\""),
        "{}",
        err.msg
    );
    // Outside the pod's pool; not a JSON list; two of one family.
    let err = ClusterPool::add(
        &call(Command::Add, "a", "x", 1, &annotated(r#"["10.99.0.1"]"#)),
        &mut store,
    )
    .unwrap_err();
    assert!(
        err.msg
            .contains("requested address 10.99.0.1 is not in pool"),
        "{}",
        err.msg
    );
    for bad in ["10.9.0.21", r#"["10.9.0.21", "10.9.0.22"]"#, r#"["nope"]"#] {
        let err = ClusterPool::add(
            &call(Command::Add, "a", "x", 1, &annotated(bad)),
            &mut store,
        )
        .unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG, "{bad}");
        assert!(
            err.msg.contains("pod annotation wasm-ipam.io/ip-addrs is"),
            "{}",
            err.msg
        );
    }
    // Freed by GC (its sandbox gone), the address is the pod's again at its next ADD.
    ClusterPool::gc(&call(Command::Gc, "a", "", 2, &conf), &[], &mut store).unwrap();
    let again = ClusterPool::add(&call(Command::Add, "a", "vm-2", 3, &vm), &mut store).unwrap();
    assert_eq!(bare(&again.ips[0].address), "10.9.0.20");
    // A pool that refuses requested addresses refuses this one, whatever asks for it.
    let strict = config(json!({"cidr": "10.9.0.0/26", "allowRequested": false}));
    let mut refused = strict.clone();
    refused["runtimeConfig"] =
        json!({"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/ip-addrs": r#"["10.9.0.30"]"#}});
    let mut store = MemoryStore::default();
    let err = ClusterPool::add(&call(Command::Add, "a", "t", 1, &refused), &mut store).unwrap_err();
    assert_eq!(err.code, codes::REQUESTS_REFUSED);
    assert!(
        err.msg
            .contains("requested address 10.9.0.30: pool \"default\" refuses"),
        "{}",
        err.msg
    );
    let err = ClusterPool::add(
        &call(Command::Add, "a", "t", 1, &strict).with_args(&[("IP", "10.9.0.31")]),
        &mut store,
    )
    .unwrap_err();
    assert_eq!(err.code, codes::REQUESTS_REFUSED);
    assert!(store.list("").is_empty(), "nothing written");
}

#[test]
fn check_of_a_container_never_added_is_the_specs_unknown_container_and_its_del_succeeds() {
    let conf = config(json!({"cidr": "10.9.0.0/27"}));
    let mut store = MemoryStore::default();
    add(&mut store, "a", "a0", 1, &conf);
    ClusterPool::check(&call(Command::Check, "a", "a0", 1, &conf), &store).unwrap();
    let err =
        ClusterPool::check(&call(Command::Check, "a", "never", 1, &conf), &store).unwrap_err();
    assert_eq!(err.code, code::UNKNOWN_CONTAINER, "{err:?}");
    assert!(err.msg.contains("never"), "{}", err.msg);
    del(&mut store, "a", "never", 2, &conf);
}

#[test]
fn a_requested_address_another_container_holds_has_its_own_code_and_names_the_holder() {
    let conf = config(json!({"cidr": "10.9.0.0/27", "allowRequested": true}));
    let mut store = MemoryStore::default();
    let held = add(&mut store, "b", "b0", 1, &conf);
    let ip = bare(&held).to_string();
    let err = ClusterPool::add(
        &call(Command::Add, "a", "a0", 1, &conf).with_args(&[("IP", ip.as_str())]),
        &mut store,
    )
    .unwrap_err();
    assert_eq!(err.code, codes::ADDRESS_HELD, "{err:?}");
    assert_eq!(
        err.msg,
        format!("requested address {ip} is held by container \"b0\" (interface eth0) on node b")
    );
}

#[test]
fn a_node_at_its_block_limit_while_unclaimed_blocks_are_free_is_told_its_limit_not_exhausted() {
    // Four /28 blocks of 13; one block per node; a's and b's blocks full.
    let conf = config(json!({"cidr": "10.9.0.0/26", "maxBlocksPerNode": 1}));
    let mut store = MemoryStore::default();
    for i in 0..13 {
        add(&mut store, "a", &format!("a{i}"), 1, &conf);
        add(&mut store, "b", &format!("b{i}"), 1, &conf);
    }
    let before = store.clone();
    let err = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::BLOCK_LIMIT, "{err:?}");
    assert!(
        err.msg.contains("blocks no node has claimed")
            && err.msg.contains("raise maxBlocksPerNode"),
        "{}",
        err.msg
    );
    assert!(!err.msg.contains("exhausted"), "{}", err.msg);
    assert_eq!(store, before, "nothing written");
    // With every block claimed and full, it is exhausted, and says so.
    for (node, prefix) in [("c", "c"), ("d", "d")] {
        for i in 0..13 {
            add(&mut store, node, &format!("{prefix}{i}"), 1, &conf);
        }
    }
    let err = ClusterPool::add(&call(Command::Add, "a", "a13", 1, &conf), &mut store).unwrap_err();
    assert_eq!(err.code, codes::EXHAUSTED, "{err:?}");
    assert!(err.msg.contains("the pool is exhausted"), "{}", err.msg);
}
