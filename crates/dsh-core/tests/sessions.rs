//! Sessions: the header, turns, the append-only log (order, `seq`, timestamps), sinks (which
//! see every later append and can refuse one) and `last_event`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_core::{Session, SessionError, SessionEvent, SessionHeader};
use parking_lot::Mutex;
use serde_json::json;

fn session(id: &str) -> Arc<Session> {
    Session::new(SessionHeader { id: id.into(), cwd: Some(PathBuf::from("/w")) })
}

fn kinds(events: &[SessionEvent]) -> Vec<(u64, String)> {
    events.iter().map(|e| (e.seq, e.kind.clone())).collect()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after the epoch").as_millis() as u64
}

#[test]
fn the_header_is_the_sessions_identity() {
    let s = session("s1");
    assert_eq!(s.id(), "s1");
    assert_eq!(s.header(), &SessionHeader { id: "s1".into(), cwd: Some(PathBuf::from("/w")) });
    assert_eq!(serde_json::to_value(s.header()).expect("json"), json!({"id": "s1", "cwd": "/w"}));
    let bare = SessionHeader { id: "s2".into(), cwd: None };
    assert_eq!(serde_json::to_value(&bare).expect("json"), json!({"id": "s2"}), "no cwd, no key");
}

#[test]
fn turns_open_and_close_with_their_events() {
    let s = session("s");
    assert!(!s.in_open_turn(), "a new session has no open turn");
    s.begin_turn().expect("begin");
    assert!(s.in_open_turn());
    s.append("tool/call", json!({"n": 1})).expect("append");
    assert!(s.in_open_turn(), "other events leave the turn open");
    s.end_turn().expect("end");
    assert!(!s.in_open_turn());
    s.begin_turn().expect("begin again");
    assert!(s.in_open_turn());
    assert_eq!(
        kinds(&s.events()),
        [(1, "turn/start".into()), (2, "tool/call".into()), (3, "turn/end".into()), (4, "turn/start".into())]
    );
    assert_eq!(s.events()[0].data, json!({}));
}

#[test]
fn appends_keep_their_order_and_number_from_one() {
    let s = session("s");
    let before = now_ms();
    let first = s.append("a", json!(1)).expect("a");
    let second = s.append("b", json!({"x": [1, 2]})).expect("b");
    let third = s.append("a", json!(3)).expect("a again");
    let after = now_ms();
    assert_eq!((first.seq, second.seq, third.seq), (1, 2, 3));
    assert_eq!(s.events(), [first.clone(), second, third]);
    assert!(s.events().iter().all(|e| before <= e.at && e.at <= after), "epoch milliseconds of the append");
    assert_eq!(
        serde_json::to_value(&first).expect("json"),
        json!({"seq": 1, "at": first.at, "type": "a", "data": 1})
    );
}

#[test]
fn last_event_is_the_latest_of_its_kind() {
    let s = session("s");
    assert_eq!(s.last_event("a"), None);
    s.append("a", json!(1)).expect("a");
    s.append("b", json!(2)).expect("b");
    s.append("a", json!(3)).expect("a");
    s.append("b", json!(4)).expect("b");
    let last = s.last_event("a").expect("an a");
    assert_eq!((last.seq, last.data), (3, json!(3)));
    assert_eq!(s.last_event("b").map(|e| e.seq), Some(4));
    assert_eq!(s.last_event("c"), None);
}

#[test]
fn sinks_see_every_later_append_with_the_header() {
    let s = session("s");
    s.append("early", json!(0)).expect("before any sink");
    let seen: Arc<Mutex<Vec<(String, u64, String)>>> = Arc::default();
    let log = Arc::clone(&seen);
    s.add_sink(Arc::new(move |header, event| {
        log.lock().push((header.id.clone(), event.seq, event.kind.clone()));
        Ok(())
    }));
    let second: Arc<Mutex<Vec<u64>>> = Arc::default();
    let log = Arc::clone(&second);
    s.add_sink(Arc::new(move |_, event| {
        log.lock().push(event.seq);
        Ok(())
    }));
    s.begin_turn().expect("turn");
    s.append("x", json!(null)).expect("x");
    assert_eq!(*seen.lock(), [("s".into(), 2, "turn/start".into()), ("s".into(), 3, "x".into())]);
    assert_eq!(*second.lock(), [2, 3], "every sink sees every append");
}

#[test]
fn a_refusing_sink_aborts_the_append_and_nothing_is_recorded() {
    let s = session("s");
    s.append("kept", json!(1)).expect("kept");
    let refuse = Arc::new(Mutex::new(true));
    let refusing = Arc::clone(&refuse);
    let error = SessionError::log_io("/logs/s.jsonl", std::io::Error::other("disk full"));
    let returned = error.clone();
    s.add_sink(Arc::new(move |_, _| if *refusing.lock() { Err(returned.clone()) } else { Ok(()) }));

    let refused = s.append("lost", json!(2)).expect_err("the sink refuses");
    assert_eq!(refused, error);
    assert_eq!(refused.to_string(), "session log /logs/s.jsonl: disk full");
    assert_eq!(kinds(&s.events()), [(1, "kept".into())], "nothing was recorded");
    assert_eq!(s.last_event("lost"), None);
    assert!(s.begin_turn().is_err(), "turn boundaries go through the same append");
    assert!(!s.in_open_turn());

    *refuse.lock() = false;
    let next = s.append("next", json!(3)).expect("accepted again");
    assert_eq!(next.seq, 2, "a refused append takes no number");
}
