//! Agents and their registry: registration (duplicates refused, the same instance accepted),
//! lookup, detaching and unregistering, status, and out-of-band delivery (inject, followup,
//! the inbox and its claims), plus the lifecycle the agents plugin ends on disposal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dsh_core::plugins::AgentsPlugin;
use dsh_core::{AGENTS, Agent, AgentError, AgentMessage, AgentStatus, Agents, Context, Delivery};
use parking_lot::Mutex;
use serde_json::json;

fn notice(text: &str) -> AgentMessage {
    AgentMessage { text: text.into(), source: json!({"kind": "plugin", "plugin": "test", "form": "notice"}) }
}

/// Records `label` into `log` when `agent` is disposed.
fn on_dispose_log(agent: &Agent, log: &Arc<Mutex<Vec<String>>>, label: &str) -> u64 {
    let (log, label) = (Arc::clone(log), label.to_owned());
    agent.on_dispose(Box::new(move || {
        Box::pin(async move {
            log.lock().push(label);
        })
    }))
}

#[tokio::test]
async fn the_registry_registers_refuses_duplicates_and_looks_agents_up() {
    let agents = Agents::new();
    let alice = Agent::new("alice", Some("/work".into()));
    let bob = Agent::new("bob", None);
    agents.register(Arc::clone(&alice)).expect("alice");
    agents.register(Arc::clone(&bob)).expect("bob");
    agents.register(Arc::clone(&alice)).expect("the same instance again is accepted");

    let impostor = Agent::new("alice", None);
    let error = agents.register(Arc::clone(&impostor)).expect_err("another instance under a taken id");
    assert_eq!(error, AgentError::AlreadyRegistered("alice".into()));
    assert_eq!(error.to_string(), "agent \"alice\" is already registered");

    assert!(Arc::ptr_eq(&agents.get("alice").expect("alice"), &alice), "the first instance stays");
    assert!(agents.get("carol").is_none());
    assert!(agents.is_registered(&alice));
    assert!(!agents.is_registered(&impostor), "same id, other instance");
    let mut ids: Vec<String> = agents.all().iter().map(|a| a.id().to_owned()).collect();
    ids.sort();
    assert_eq!(ids, ["alice", "bob"]);
    assert_eq!(alice.id(), alice.session().id(), "an agent's id is its session's");
    assert_eq!(alice.session().header().cwd.as_deref(), Some(std::path::Path::new("/work")));
}

#[tokio::test]
async fn detaching_keeps_the_agent_alive_and_unregistering_ends_it() {
    let agents = Agents::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let alice = Agent::new("alice", None);
    let bob = Agent::new("bob", None);
    on_dispose_log(&alice, &log, "alice");
    on_dispose_log(&bob, &log, "bob");
    agents.register(Arc::clone(&alice)).expect("alice");
    agents.register(Arc::clone(&bob)).expect("bob");

    let detached = agents.detach("alice").expect("detached");
    assert!(Arc::ptr_eq(&detached, &alice));
    assert!(agents.get("alice").is_none() && !alice.is_disposed(), "detached, not ended");
    agents.register(Agent::new("alice", None)).expect("the id is free again");

    let gone = agents.unregister("bob").await.expect("bob was registered");
    assert!(Arc::ptr_eq(&gone, &bob));
    assert!(bob.is_disposed() && agents.get("bob").is_none());
    assert_eq!(*log.lock(), ["bob"]);
    assert!(agents.unregister("bob").await.is_none(), "nothing left to unregister");

    agents.dispose_all().await;
    assert!(agents.all().is_empty());
    assert!(!alice.is_disposed(), "the detached instance is not the registry's to end");
}

#[tokio::test]
async fn disposing_the_agents_plugin_ends_every_live_agent() {
    let ctx = Context::new();
    ctx.load_default::<AgentsPlugin>().expect("agents");
    let agents = ctx.get(AGENTS).expect("the agents service");
    let alice = Agent::new("alice", None);
    agents.register(Arc::clone(&alice)).expect("register");
    ctx.dispose().await;
    assert!(alice.is_disposed());
    assert!(agents.all().is_empty());
    assert!(ctx.get(AGENTS).is_none());
}

#[tokio::test]
async fn dispose_hooks_run_once_in_reverse_and_can_be_cancelled() {
    let agent = Agent::new("a", None);
    let log = Arc::new(Mutex::new(Vec::new()));
    on_dispose_log(&agent, &log, "first");
    let cancelled = on_dispose_log(&agent, &log, "cancelled");
    on_dispose_log(&agent, &log, "last");
    agent.cancel_on_dispose(cancelled);
    assert!(!agent.is_disposed());
    agent.dispose().await;
    assert!(agent.is_disposed());
    agent.dispose().await;
    assert_eq!(*log.lock(), ["last", "first"]);
}

#[test]
fn an_agent_starts_idle_and_reports_the_status_it_is_given() {
    let agent = Agent::new("a", None);
    assert_eq!(agent.status(), AgentStatus::Idle);
    agent.set_status(AgentStatus::Busy);
    assert_eq!(agent.status(), AgentStatus::Busy);
    agent.set_status(AgentStatus::Idle);
    assert_eq!(agent.status(), AgentStatus::Idle);
    assert_eq!(serde_json::to_value(AgentStatus::Busy).expect("json"), json!("busy"));
}

#[test]
fn deliveries_reach_listeners_at_once_and_wait_in_the_inbox_in_order() {
    let agent = Agent::new("a", None);
    let delivered: Arc<Mutex<Vec<(String, Delivery, String)>>> = Arc::default();
    let claimed: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&delivered);
    agent.on_delivery(move |agent, lane, message| {
        sink.lock().push((agent.id().to_owned(), lane, message.text.clone()));
    });
    let sink = Arc::clone(&claimed);
    agent.on_claim(move |_, message| sink.lock().push(message.text.clone()));

    agent.inject(notice("job done"));
    agent.followup(AgentMessage::user("next question"));
    agent.inject(notice("another"));
    assert_eq!(
        *delivered.lock(),
        [
            ("a".to_owned(), Delivery::Inject, "job done".to_owned()),
            ("a".to_owned(), Delivery::Followup, "next question".to_owned()),
            ("a".to_owned(), Delivery::Inject, "another".to_owned()),
        ]
    );
    assert!(claimed.lock().is_empty(), "delivering is not claiming");

    let inbox = agent.take_inbox();
    let lanes: Vec<(Delivery, &str)> = inbox.iter().map(|(lane, m)| (*lane, m.text.as_str())).collect();
    assert_eq!(
        lanes,
        [
            (Delivery::Inject, "job done"),
            (Delivery::Followup, "next question"),
            (Delivery::Inject, "another")
        ]
    );
    assert_eq!(*claimed.lock(), ["job done", "next question", "another"], "taking claims each message");
    assert!(inbox[1].1.is_user_authored() && !inbox[0].1.is_user_authored());
    assert!(agent.take_inbox().is_empty(), "the inbox is emptied");

    agent.followup(AgentMessage::user("later"));
    assert_eq!(agent.take_inbox(), [(Delivery::Followup, AgentMessage::user("later"))]);
    assert_eq!(delivered.lock().len(), 4);
}

#[test]
fn a_listener_registered_later_sees_only_later_deliveries() {
    let agent = Agent::new("a", None);
    agent.inject(notice("before"));
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    agent.on_delivery(move |_, _, _| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    agent.inject(notice("after"));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert_eq!(agent.take_inbox().len(), 2, "both still wait in the inbox");
    let claimed = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&claimed);
    agent.on_claim(move |_, _| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    agent.claim(&AgentMessage::user("direct"));
    assert_eq!(claimed.load(Ordering::SeqCst), 1, "a direct claim reaches claim listeners");
}
