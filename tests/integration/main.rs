//! Integration tests: run the real `wasm-ipam` binary exactly as a container runtime
//! does (CNI_* environment variables, netconf on stdin) and check its stdout, exit
//! code, store and log.

mod abandoned;
mod authoring;
mod bad_input;
#[path = "../shared/builds.rs"]
mod builds;
mod cache;
mod call_log;
mod cluster_calls;
mod cluster_guide;
mod cluster_operator_commands;
mod cluster_serializable;
mod cluster_store;
mod conform;
mod contract;
mod crash;
mod deadline;
mod doc_blocks;
mod etcd;
mod etcd_outage;
mod etcd_upkeep;
mod etcd_workings;
mod fair_lock;
#[allow(dead_code, reason = "shared by several suites, each using part of it")]
#[path = "../shared/flocks.rs"]
mod flocks;
mod fuzz_corpus;
mod go_sdk;
mod go_sdk_contract;
mod go_sdk_host;
mod harness;
mod host_local_module;
mod host_local_parity;
mod hostile;
mod install;
mod install_doc_lines;
mod install_kubeconfig;
mod kube_api;
mod kube_store;
mod kube_store_calls;
mod kube_store_flow_control;
mod kube_store_objects;
mod kube_store_outages;
mod local_security;
mod log_rotation;
mod main_plugins;
mod operators;
mod pipeline;
mod pools;
mod pools_figures;
mod pools_reservations;
mod pools_sticky;
mod protocol;
mod static_go;
mod static_parity;
mod static_py;
mod status;
mod store;
mod store_migrate;
mod supply_chain;
mod supply_chain_node_policy;
mod supply_chain_refused;
mod tutorial;
#[path = "../shared/waiting.rs"]
mod waiting;
#[path = "../shared/wat_component.rs"]
mod wat_component;
