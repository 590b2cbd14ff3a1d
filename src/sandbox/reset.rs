//! `reset`: a new container for an existing sandbox, made from its template as the
//! template is now, with the options `up` was given. The workspace (directory,
//! worktree and branch, or jj workspace) is not touched, so no work can be lost.

use super::plan::{container_spec, guard, with_workspace_mounts, ContainerPlan};
use super::Engine;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{Record, RecordState};
use crate::runtime::Runtime;
use crate::template;

impl<R: Runtime> Engine<R> {
    /// Replaces the sandbox's container. Everything that can be refused (the
    /// template, its secrets and mounts, the image) is settled while the old
    /// container still runs; only then is it swapped. A failure after the swap
    /// began leaves the sandbox `missing` or stopped, never half a workspace, and
    /// `reset` again finishes it.
    ///
    /// `resolve` finds a template by name (the record's), as `up` would.
    pub async fn reset(
        &self,
        name: &SandboxName,
        resolve: impl Fn(&str) -> Result<template::Resolved>,
    ) -> Result<Record> {
        let _lock = self.lock_sandbox(name).await?;
        let mut record = self.record(name)?;
        refuse_unresettable(name, &record)?;
        let mut template = resolve(&record.template)?;
        super::agent_state::waive_secrets_for_login(&self.home, &mut template, &record.options)?;
        let template = &template;
        self.refuse_template_in_reach(template, &[])?;
        let options = &record.options.clone();
        // Everything refused before a possibly slow image build.
        let guard = guard(&self.home, &self.settings);
        let plan = self.plan_again(template, &record, &guard)?;
        refuse_network_change(&record, &plan)?;
        record.workspace.check_host_paths(&guard)?;
        let image = self.runtime.ensure_image(&plan.image, self.progress.as_ref()).await?;
        let spec =
            container_spec(name, template, options, &plan, &record.workspace, image.clone(), &self.home, self.identity);
        self.check_program(&spec)?;
        let spec = with_workspace_mounts(spec, &record.workspace, plan.read_only, &guard);
        let mut spec = super::egress::attach(spec, &record);
        // Ports added since `up` count too.
        spec.publishes |= !record.ports.is_empty() || !record.unpublished.is_empty();
        self.copy_secrets_of_older_record(&mut record).await?;
        record.pins = self.repin(&record, &spec.mounts)?;
        self.refuse_overlap(name, &super::pins::HostPath::of_mounts(&spec.mounts))?;

        let state = self.remove_old_container(&record).await?;
        // From here on the record describes the new container.
        record.image = image.reference.clone();
        record.stop_timeout = template.template.stop_timeout;
        record.init = plan.init.clone();
        record.toolchain = super::up::built_toolchain(&plan, &image);
        record.stopped_at = None;
        self.home.save(&record)?;

        let made = async {
            self.step(&format!("creating container {}", spec.name));
            self.runtime.create(&spec).await?;
            self.give_egress_trust(&record).await?;
            if state {
                self.hand_state(&record, &template.template.agent.state).await?;
            }
            if let Err(e) = self.start_agent(&record, &spec.mounts).await {
                // The agent's launcher would wait for init forever: stop it instead.
                self.runtime.stop(&spec.name, record.stop_timeout).await?;
                return Err(e);
            }
            Ok(())
        };
        if let Err(e) = made.await {
            self.progress.finish();
            return Err(e
                .with_note("the old container is gone and the workspace is untouched")
                .hint_run("fix the cause and run {command} again", ["reset", name.as_str()])
                .hint_run("or remove the sandbox with {command}", ["down", name.as_str()]));
        }
        self.refresh_ports(&mut record).await?;
        self.progress.finish();
        Ok(record)
    }

    /// The container's plan from the template as it is now, and the
    /// project's toolchain `up` used, as it was built then: not read again
    /// from a checkout that may have changed since.
    fn plan_again(
        &self,
        template: &template::Resolved,
        record: &Record,
        guard: &crate::host_paths::Guard,
    ) -> Result<ContainerPlan> {
        let secrets_dir = self.home.secrets_dir().join(record.name.as_str());
        let toolchain = record.toolchain.as_ref();
        ContainerPlan::new(template, &record.options, guard, &self.settings, self.identity, &secrets_dir, toolchain)
    }

    /// Stops and removes the sandbox's container, its agent's state taken
    /// back first; whether it had any, for the new container to get (with
    /// the template's state paths as they are now).
    async fn remove_old_container(&self, record: &Record) -> Result<bool> {
        self.step(&format!("removing container {}", record.container));
        self.runtime.stop(&record.container, record.stop_timeout).await?;
        let state = record.journal.contains(&crate::record::Step::AgentState);
        if state {
            self.take_back_and_say(record).await;
        }
        self.runtime.remove(&record.container).await?;
        Ok(state)
    }

    /// The pins of the new container's `mounts`: a path the old container
    /// mounted too must still be the object pinned then (a workspace is never
    /// re-pinned to whatever is there now); one the template mounts anew is
    /// checked and pinned as `up` would.
    fn repin(&self, record: &Record, mounts: &[crate::runtime::Mount]) -> Result<Vec<crate::host_paths::pin::Pin>> {
        let (known, new): (Vec<_>, Vec<_>) =
            mounts.iter().cloned().partition(|m| record.pins.iter().any(|p| p.path == m.source));
        if !record.pins.is_empty() {
            self.check_pinned(record, &known)?;
        }
        let mut pins: Vec<_> =
            record.pins.iter().filter(|p| known.iter().any(|m| m.source == p.path)).cloned().collect();
        for pin in &mut pins {
            pin.writable = known.iter().any(|m| m.source == pin.path && !m.read_only);
        }
        pins.extend(self.pin_mounts(record, &new)?);
        Ok(pins)
    }

    /// A sandbox made by an older forage mounted its secret files where they
    /// were: `reset` copies them, once, with the checks `up` makes now.
    async fn copy_secrets_of_older_record(&self, record: &mut Record) -> Result<()> {
        if record.options.secrets.is_empty() || record.journal.contains(&crate::record::Step::Secrets) {
            return Ok(());
        }
        let own = super::pins::HostPath::of_mounts(
            &record.workspace.mounts(record.options.read_only, &guard(&self.home, &self.settings)),
        );
        for secret in &record.options.secrets {
            if let Some(file) = secret.file() {
                self.refuse_secret_in_reach(file, &secret.name, &own)?;
            }
        }
        let injected: Vec<String> =
            record.egress.iter().flat_map(|e| e.inject.iter().map(|r| r.secret.clone())).collect();
        self.copy_secrets(record, &injected).await
    }
}

/// A sandbox keeps the network (and allowlist) it was made with: `reset`
/// refuses a template that now gives it `restricted`, or takes it away.
fn refuse_network_change(record: &Record, plan: &super::plan::ContainerPlan) -> Result<()> {
    let restricted = plan.network == crate::runtime::Network::Restricted;
    if restricted == record.egress.is_some() {
        return Ok(());
    }
    let name = record.name.as_str();
    Err(Error::conflict(format!(
        "template {} now gives sandbox {name} network {}, which `reset` cannot change",
        record.template,
        plan.network.as_str()
    ))
    .hint_run("{command} keeps its work", ["down", name])
    .hint_run("and {command} makes it again with the new network", ["up", name]))
}

/// A sandbox `reset` cannot give a new container: one half made, or one an
/// older forage made with the repository shared with the agent.
fn refuse_unresettable(name: &SandboxName, record: &Record) -> Result<()> {
    if record.state != RecordState::Ready {
        return Err(super::lifecycle::half_made(name));
    }
    if record.workspace.get().is_legacy() {
        return Err(Error::conflict(format!(
            "sandbox {name} was made by an older forage, whose {} sandboxes shared the repository with the agent",
            record.workspace.mode()
        ))
        .hint_run("{command} keeps its work", ["down", name.as_str()])
        .hint_run("and {command} makes a new, isolated sandbox", ["up", name.as_str()]));
    }
    Ok(())
}
