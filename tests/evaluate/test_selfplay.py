"""Runs of self-play conversations (dial_runtime.evaluate.persona): held into a real SQLite store and read back,
planned in a manifest that holds the same conversations again, with seeds and settings reaching a real
chat-completions server that plays the person, scored by the counterfactual replay, and the command's lines and
one-line errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from dial_runtime._command import _CommandError
from dial_runtime.demo import NotesDomain
from dial_runtime.evaluate import evaluate
from dial_runtime.evaluate.command import add_selfplay_arguments
from dial_runtime.evaluate.persona import (
    Persona,
    SelfPlayManifest,
    SelfPlayRun,
    persona_prompt,
    plan_selfplay,
    run_selfplay_command,
    selfplay,
)
from dial_runtime.runtime.events import ActionStartedEvent, Event, LogEntry
from dial_runtime.stores import open_store
from dial_runtime.views.person import Card, project

from ..fakes import envelope, suggest
from ..openai_server import OpenAIServer, Request

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples"
PERSONA = EXAMPLES / "persona-notes.json"
AGENT = f"script:{EXAMPLES / 'notes-replies.json'}"
NOTES = "dial_runtime.demo:NotesDomain"

#: What the example persona's model says to the example agent's script, in order: accept the note, answer "no"
#: to tidying up, dismiss the removal, say a last thing, be done.
PERSON = [
    {"decision": "accept"},
    {"answer": "no"},
    {"decision": "dismiss"},
    {"say": "that is all, thanks"},
    {"done": True},
]


@pytest.fixture(params=[pytest.param(("trio", {}), id="trio"), pytest.param(("asyncio", {}), id="asyncio")])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Real clocks: the SQLite store works in threads, and a real server answers the persona's model."""
    return request.param  # type: ignore[no-any-return]


def script(path: Path, replies: list[Any]) -> str:
    """A ``script:`` URI for the replies (objects written as JSON), written to ``path``."""
    path.write_text(json.dumps([reply if isinstance(reply, str) else json.dumps(reply) for reply in replies]))
    return f"script:{path}"


def events(entries: list[LogEntry] | tuple[LogEntry, ...]) -> list[Event]:
    """The events of a log, each run's idempotency key left out: it holds when the log began, so the runs of a
    log held again are never taken for retries of the first one's."""
    return [
        msgspec.structs.replace(entry.event, key="")
        if isinstance(entry.event, ActionStartedEvent)
        else entry.event
        for entry in entries
    ]


def run_keys(entries: list[LogEntry] | tuple[LogEntry, ...]) -> list[str | None]:
    return [entry.event.key for entry in entries if isinstance(entry.event, ActionStartedEvent)]


async def stored(url: str) -> dict[str, list[LogEntry]]:
    store = open_store(url, create=False)
    try:
        return {conversation: await store.read(conversation) for conversation in await store.conversations()}
    finally:
        await store.aclose()


async def hold(manifest: SelfPlayManifest, url: str) -> list[SelfPlayRun]:
    store = open_store(url)
    try:
        return await selfplay(manifest, store=store)
    finally:
        await store.aclose()


async def test_a_run_holds_each_conversation_afresh_into_sqlite(tmp_path: Path) -> None:
    manifest = plan_selfplay(
        agent=AGENT,
        persona_model=script(tmp_path / "person.json", PERSON),
        persona=PERSONA,
        domain=NOTES,
        n=3,
        run_id="r1",
    )
    runs = await hold(manifest, f"sqlite:{tmp_path / 'runs.db'}")
    ids = ["selfplay-r1-0", "selfplay-r1-1", "selfplay-r1-2"]
    assert [(run.conversation_id, run.ended, run.said, run.unclear) for run in runs] == [
        (ident, "done", 2, 0) for ident in ids
    ]
    back = await stored(f"sqlite:{tmp_path / 'runs.db'}")
    assert sorted(back) == ids
    for run in runs:
        assert back[run.conversation_id] == list(run.entries)
        seen = [card for card in project(run.entries).items if isinstance(card, Card)]
        # a fresh notebook each time: the note is the first in every conversation
        assert [(card.action, card.status, card.result) for card in seen] == [
            ("add-note", "done", '{"count": 1}'),
            ("list-notes", "done", '{"notes": ["buy milk"]}'),
            ("remove-note", "dismissed", None),
        ]


async def test_the_same_manifest_holds_the_same_conversations_again(tmp_path: Path) -> None:
    manifest = plan_selfplay(
        agent=AGENT, persona_model=script(tmp_path / "person.json", PERSON), persona=PERSONA, domain=NOTES, n=2
    )
    (tmp_path / "manifest.json").write_bytes(manifest.to_json())
    first = await hold(manifest, f"sqlite:{tmp_path / 'first.db'}")
    again = SelfPlayManifest.from_file(tmp_path / "manifest.json")
    assert again == manifest
    second = await hold(again, f"sqlite:{tmp_path / 'second.db'}")
    assert [events(run.entries) for run in first] == [events(run.entries) for run in second]
    assert all(
        set(run_keys(a.entries)).isdisjoint(run_keys(b.entries)) for a, b in zip(first, second, strict=True)
    )
    assert [run.conversation_id for run in second] == [planned.id for planned in manifest.conversations]
    with pytest.raises(ValueError, match=r"the store holds a conversation 'selfplay-.*-0' already"):
        await hold(again, f"sqlite:{tmp_path / 'second.db'}")


async def test_the_stored_conversations_are_scored_by_the_counterfactual_replay(tmp_path: Path) -> None:
    manifest = plan_selfplay(
        agent=AGENT, persona_model=script(tmp_path / "person.json", PERSON), persona=PERSONA, domain=NOTES, n=1
    )
    await hold(manifest, f"sqlite:{tmp_path / 'runs.db'}")
    report = await evaluate(await stored(f"sqlite:{tmp_path / 'runs.db'}"), {"same": AGENT}, domain=NotesDomain())
    for side in ("recorded", "same"):
        assert report.summary[side]["accepted_payload"].mean == 1.0
        assert report.summary[side]["repeats_dismissed"].mean == 1.0  # the removal the person dismissed, again


def test_a_plan_records_the_models_settings_and_each_conversations_seeds() -> None:
    uri = "http://127.0.0.1:9/v1?temperature=0.25&seed=7&max_tokens=64#m"
    manifest = plan_selfplay(agent=AGENT, persona_model=uri, persona=PERSONA, domain=NOTES, n=2, run_id="r")
    assert manifest.persona_model.settings == {"temperature": 0.25, "max_tokens": 64}
    assert (manifest.agent.settings, manifest.agent.seed) == ({}, None)
    assert [(c.id, c.agent_seed, c.persona_seed) for c in manifest.conversations] == [
        ("selfplay-r-0", None, 7),
        ("selfplay-r-1", None, 8),
    ]
    chosen = plan_selfplay(agent=uri, persona_model=uri, persona=PERSONA, domain=NOTES, n=2, seed=100)
    assert [(c.agent_seed, c.persona_seed) for c in chosen.conversations] == [(100, 100), (101, 101)]
    unseeded = plan_selfplay(agent=AGENT, persona_model="ollama:llama3.1", persona=PERSONA, domain=NOTES, n=1)
    assert unseeded.conversations[0].persona_seed is None
    assert manifest.persona_content == PERSONA.read_text(encoding="utf-8")
    assert manifest.persona == Persona.from_file(PERSONA)
    assert manifest.runtime_version and manifest.date.endswith("+00:00")


def answer_as_a_person(request: Request) -> str:
    """The persona's model behind the server: accept every card, be done when asked for words."""
    kind = request.messages[-1]["content"].partition("\n")[0]
    replies = {"REQUEST: card": {"decision": "accept"}, "REQUEST: words": {"done": True}}
    return "Here is my answer: " + json.dumps(replies[kind])


async def test_a_chat_model_plays_the_person_with_the_runs_seeds_and_settings(tmp_path: Path) -> None:
    agent = script(tmp_path / "agent.json", [envelope(suggest("add-note", '{"text": "buy milk"}')), "Added."])
    with OpenAIServer(default=answer_as_a_person) as server:
        manifest = plan_selfplay(
            agent=agent,
            persona_model=f"{server.base_url}?temperature=0.25&seed=7#persona",
            persona=PERSONA,
            domain=NOTES,
            n=2,
        )
        with anyio.fail_after(30):
            runs = await hold(manifest, f"sqlite:{tmp_path / 'runs.db'}")
    assert [(run.ended, run.said, run.unclear) for run in runs] == [("done", 1, 0)] * 2
    bodies = [request.body for request in server.requests]
    assert [(body["seed"], body["temperature"], body["model"]) for body in bodies] == [
        (7, 0.25, "persona"),
        (7, 0.25, "persona"),
        (8, 0.25, "persona"),
        (8, 0.25, "persona"),
    ]
    system = {"role": "system", "content": persona_prompt(Persona.from_file(PERSONA))}
    assert all(body["messages"][0] == system for body in bodies)
    card, words = bodies[0]["messages"][1:], bodies[1]["messages"][1:]
    assert card[0]["content"].startswith("REQUEST: card\n") and len(card) == 1
    assert words[:2] == [*card, {"role": "assistant", "content": 'Here is my answer: {"decision": "accept"}'}]
    assert words[2]["content"].startswith("REQUEST: words\n")
    assert bodies[2]["messages"][1:] == card  # a fresh model for the second conversation


# --- the command -------------------------------------------------------------------------------------------------


def command(*argv: str | Path) -> int:
    parser = argparse.ArgumentParser()
    add_selfplay_arguments(parser)
    return run_selfplay_command(parser.parse_args([str(arg) for arg in argv]))


def test_the_command_holds_a_run_and_repeat_holds_it_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    person = script(tmp_path / "person.json", PERSON)
    flags: list[str | Path] = ["--agent", AGENT, "--persona", PERSONA, "--persona-model", person]
    flags += ["--domain", NOTES]
    assert command(*flags, "--store", "sqlite:first.db", "-n", "2", "--seed", "5") == 0
    lines = capsys.readouterr().out.splitlines()
    manifest = SelfPlayManifest.from_file(tmp_path / f"selfplay-{lines[0].split('-')[1]}.json")
    ids = [planned.id for planned in manifest.conversations]
    assert lines == [
        f"{ids[0]}  done  (said 2, 5 turn(s))",
        f"{ids[1]}  done  (said 2, 5 turn(s))",
        f"manifest: selfplay-{manifest.run_id}.json",
    ]
    assert [(planned.agent_seed, planned.persona_seed) for planned in manifest.conversations] == [(None, None)] * 2

    assert command("--repeat", lines[-1].removeprefix("manifest: "), "--store", "sqlite:second.db") == 0
    assert capsys.readouterr().out.splitlines() == [*lines[:2], f"{lines[-1]} (held again)"]
    first, second = anyio.run(stored, "sqlite:first.db"), anyio.run(stored, "sqlite:second.db")
    assert {ident: events(entries) for ident, entries in first.items()} == {
        ident: events(entries) for ident, entries in second.items()
    }

    assert command(*flags, "--store", "memory:", "--manifest", "run.json") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "manifest: run.json"
    assert SelfPlayManifest.from_file("run.json").persona_sha256 == manifest.persona_sha256
    with pytest.raises(_CommandError, match=r"^cannot write the manifest 'nowhere/run.json': No such file"):
        command(*flags, "--store", "memory:", "--manifest", "nowhere/run.json")


@pytest.mark.parametrize(
    ("change", "message", "status"),
    [
        (
            {"--persona": "missing.json"},
            r"persona 'missing.json': cannot read it \(No such file or directory\)",
            1,
        ),
        ({"--persona": "bad.json"}, r"persona 'bad.json': not JSON \(Expecting value: line 1 column 1", 1),
        (
            {"--domain": "no_such_module:Notes"},
            r"--domain 'no_such_module:Notes': cannot import no_such_module",
            2,
        ),
        ({"--domain": "dial_runtime.demo:Nothing"}, r"dial_runtime.demo has no callable Nothing", 2),
        ({"--agent": "bogus"}, r"agent URI 'bogus' is not one of", 1),
        ({"-n": "0"}, r"a self-play run holds at least 1 conversation, not 0", 1),
        ({"--store": "nosuch:x"}, r"--store: store URL 'nosuch:x'", 2),
        ({"--store": None}, r"selfplay needs --store URL", 2),
        ({"--agent": None, "--domain": None}, r"selfplay needs --agent, --domain \(or --repeat MANIFEST\)", 2),
        (
            {"--repeat": "m.json"},
            r"--repeat holds the manifest's run: drop --agent, --persona, --persona-model",
            2,
        ),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, str | None], message: str, status: int
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("not json")
    given: dict[str, str | None] = {
        "--agent": AGENT,
        "--persona": str(PERSONA),
        "--persona-model": script(tmp_path / "person.json", PERSON),
        "--domain": NOTES,
        "--store": "sqlite:runs.db",
        **change,
    }
    with pytest.raises(_CommandError, match=message) as raised:
        command(*[part for name, value in given.items() if value is not None for part in (name, value)])
    assert raised.value.status == status and "\n" not in str(raised.value)
    assert not (tmp_path / "runs.db").exists()  # refused before anything was held


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, r"--repeat: manifest 'm.json': cannot read it \(No such file or directory\)"),
        (b"{", r"--repeat: manifest 'm.json': not a self-play manifest \(Input data was truncated\)$"),
        (b'{"run_id": "x"}', r"not a self-play manifest \(Object missing required field `agent`\)"),
        ("tampered", r"--repeat: manifest 'm.json': the persona's content does not match its sha256"),
        ("held", r"the store holds a conversation 'selfplay-r-0' already: hold the run again in another store"),
    ],
)
def test_a_bad_repeat_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: Any, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    planned = plan_selfplay(
        agent=AGENT,
        persona_model=script(tmp_path / "person.json", PERSON),
        persona=PERSONA,
        domain=NOTES,
        n=1,
        run_id="r",
    )
    if manifest == "tampered":
        manifest = msgspec.structs.replace(planned, persona_content='{"goal": "something else"}').to_json()
    elif manifest == "held":
        anyio.run(hold, planned, "sqlite:runs.db")
        manifest = planned.to_json()
    if manifest is not None:
        (tmp_path / "m.json").write_bytes(manifest)
    with pytest.raises(_CommandError, match=message) as raised:
        command("--repeat", "m.json", "--store", "sqlite:runs.db")
    assert raised.value.status == 1 and "\n" not in str(raised.value)


def test_a_first_try_needs_no_model_and_its_manifest_holds_again_from_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--persona-model builtin:accept`` plays the person by a rule; a ``script:`` agent given by a relative path
    is recorded by its absolute one, so ``--repeat`` holds the run from another directory."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    replies = [
        '<dial><dial-suggest action="add-note">Add it.<dial-payload>{"text": "milk"}</dial-payload></dial-suggest>'
        "</dial>",
        '<dial><dial-acknowledge of="sg-1">Added.</dial-acknowledge></dial>',
    ]
    (here / "replies.json").write_text(json.dumps(replies), encoding="utf-8")
    flags = ["--agent", "script:replies.json", "--persona", str(PERSONA), "--persona-model", "builtin:accept"]
    assert command(*flags, "--domain", NOTES, "--store", "sqlite:first.db", "--manifest", "run.json") == 0
    out = capsys.readouterr().out.splitlines()
    assert "  done  " in out[0], out
    manifest = SelfPlayManifest.from_file(here / "run.json")
    assert manifest.agent.uri == f"script:{here / 'replies.json'}"
    assert manifest.persona_model.uri == "builtin:accept"
    monkeypatch.chdir(elsewhere)
    assert command("--repeat", str(here / "run.json"), "--store", "sqlite:second.db") == 0
    first = anyio.run(stored, f"sqlite:{here / 'first.db'}")
    second = anyio.run(stored, f"sqlite:{elsewhere / 'second.db'}")
    assert [events(entries) for entries in first.values()] == [events(entries) for entries in second.values()]
    decided = [e for entries in first.values() for e in events(entries) if e.type == "decided"]
    assert decided and all(e.decision == "accept" for e in decided)  # type: ignore[union-attr]
    with pytest.raises(_CommandError, match="built-in persona models are builtin:accept and builtin:dismiss"):
        command(
            "--agent",
            f"script:{here / 'replies.json'}",
            "--persona",
            str(PERSONA),
            "--persona-model",
            "builtin:x",
            "--domain",
            NOTES,
            "--store",
            "memory:",
        )
