//! `handler`: a CNI command, asked of a module of 0.2 directly and of 0.1 through
//! [`v0_1_convert`]'s conversions. ADD's result is checked
//! ([`crate::module::answer::checked_result`]) before anything commits it.

use super::{Asked, Question, Store};
use crate::cni::IpamResult;
use crate::module::answer::{checked_result, module_error};
use crate::module::bindings::{handler, types, v0_1};
use crate::module::contract::v0_1_convert;
use crate::module::exports::{Export, Exports, Handler};
use crate::store::{AttachmentChange, AttachmentRecord};
use wasmtime::component::Instance;

/// The handler call to make.
#[derive(Clone)]
pub enum Call {
    Add,
    Del,
    Check,
    Gc(Vec<types::Attachment>),
    Status,
}

/// A CNI command: answered, for ADD, by its result, checked; otherwise by `None`.
#[derive(Clone)]
pub struct Handle {
    pub request: types::Request,
    pub call: Call,
}

impl Question for Handle {
    type Answer = Option<IpamResult>;

    fn needs(&self) -> Option<Export> {
        None
    }

    fn stamp(&mut self, granted: types::WallInstant) {
        self.request.lock_granted_at = granted;
    }

    fn attachment_change(&self) -> Option<AttachmentChange> {
        let request = &self.request;
        match &self.call {
            Call::Add => Some(AttachmentChange::Added(AttachmentRecord {
                container_id: request.container_id.clone(),
                ifname: request.ifname.clone(),
                node: request.node_name.clone(),
                netns: request.netns.clone(),
                added: request.lock_granted_at.seconds,
            })),
            Call::Del => Some(AttachmentChange::Removed {
                container_id: request.container_id.clone(),
                ifname: request.ifname.clone(),
            }),
            Call::Gc(valid) => Some(AttachmentChange::Collected {
                node: request.node_name.clone(),
                valid: valid
                    .iter()
                    .map(|a| (a.container_id.clone(), a.ifname.clone()))
                    .collect(),
            }),
            Call::Check | Call::Status => None,
        }
    }

    async fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> Asked<Self::Answer> {
        let result = match &exports.handler {
            Handler::V0_2(indices) => {
                let handler = indices.load(&mut *store, instance)?;
                current(&handler, store, self).await?
            }
            Handler::V0_1(indices) => {
                let handler = indices.load(&mut *store, instance)?;
                v0_1(&handler, store, self).await?
            }
        };
        Ok(result.and_then(|result| result.map(checked_result).transpose()))
    }
}

/// The call on a module of 0.2.
async fn current(
    handler: &handler::Guest,
    store: &mut Store,
    Handle { request, call }: Handle,
) -> Asked<Option<types::IpamResult>> {
    let s = store;
    Ok(match call {
        Call::Add => handler.call_add(s, &request).await?.map(Some),
        Call::Del => handler.call_del(s, &request).await?.map(|()| None),
        Call::Check => handler.call_check(s, &request).await?.map(|()| None),
        Call::Gc(valid) => handler.call_gc(s, &request, &valid).await?.map(|()| None),
        Call::Status => handler.call_status(s, &request).await?.map(|()| None),
    }
    .map_err(module_error))
}

/// The call on a module of 0.1: the request converted down, the result and error up.
async fn v0_1(
    handler: &v0_1::handler::Guest,
    store: &mut Store,
    Handle { request, call }: Handle,
) -> Asked<Option<types::IpamResult>> {
    let s = store;
    let request = v0_1_convert::request(request);
    Ok(match call {
        Call::Add => handler
            .call_add(s, &request)
            .await?
            .map(|r| Some(v0_1_convert::result(r))),
        Call::Del => handler.call_del(s, &request).await?.map(|()| None),
        Call::Check => handler.call_check(s, &request).await?.map(|()| None),
        Call::Gc(valid) => {
            let valid: Vec<_> = valid.into_iter().map(v0_1_convert::attachment).collect();
            handler.call_gc(s, &request, &valid).await?.map(|()| None)
        }
        Call::Status => handler.call_status(s, &request).await?.map(|()| None),
    }
    .map_err(|e| module_error(v0_1_convert::error(e))))
}
