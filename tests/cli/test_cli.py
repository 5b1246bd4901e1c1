"""The dial-runtime command line: validate, demo, diagrams, what chat sends a model, and how every command
fails."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dial_runtime import parse
from dial_runtime.cli import main
from dial_runtime.demo import NotesDomain
from dial_runtime.language.schema import validate
from dial_runtime.llm.grammar import domain_grammar

from ..llm.test_llama import llama as llama
from ..openai_server import OpenAIServer

EXAMPLE = Path(__file__).parents[2] / "examples" / "reply.xml"


@pytest.mark.parametrize("strict", [False, True])
def test_the_shipped_example_is_valid(strict: bool, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE), *(["--strict"] if strict else [])]) == 0
    assert "valid DIAL" in capsys.readouterr().out


def test_problems_are_one_line_each_with_line_element_and_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = '<dial>\n  <dial-ask response-type="maybe">Q</dial-ask>\n  <dial-declare>{}</dial-declare>\n</dial>'
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["validate", "--strict", "-"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("line 1: dial:") for line in lines)
    assert any(line.startswith("line 2: dial-ask: attribute 'response-type'") for line in lines)
    assert any(line.startswith("line 3: dial-declare: missing required attribute 'context-key'") for line in lines)


def test_a_missing_file_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no/such/file.xml"]) == 2
    assert "cannot read no/such/file.xml" in capsys.readouterr().err


def test_the_demo_tells_the_whole_story(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for line in [
        "you: add a note: buy milk",
        "agent proposes sg-1: Add the note 'buy milk'",
        "   you decide on sg-1: accept",
        "   ✓ done: Add the note 'buy milk' ({\"count\": 1})",
        "   (turn 2: the agent is told sg-1:done)",
        "   the edit was refused: Expected `str` of length <= 60.",
        "agent proposes sg-3: Remove the note 'buy milk'  [DESTRUCTIVE]",
        "   – dismissed: Remove the note 'buy milk'",
        "agent proposes sg-4: List the notes  [read-only, runs at once]",
        "   1. The dentist note",
        "   you answer: dentist",
        "agent proposes sg-5: Share the note 'call the dentist today'  [hand-off]",
        "   (the agent ends the conversation)",
        "   [ended after 3 turn(s), 4 outcome(s)]",
    ]:
        assert line in out.splitlines(), line


def test_diagrams_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg = shutil.which("dot") is not None
    assert main(["diagrams", "--out", str(tmp_path), *([] if svg else ["--no-svg"])]) == 0
    written = {path.name for path in tmp_path.iterdir()}
    assert {"suggestion_lifecycle.dot", "turn_loop.mmd", "conversation_life.dot"} <= written
    assert ("turn_loop.svg" in written) == svg


def test_the_console_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "validate", str(EXAMPLE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def _run_without_the_terminal_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command line in a process where rich and prompt_toolkit cannot be imported."""
    code = (
        "import sys\n"
        "sys.modules['rich'] = sys.modules['prompt_toolkit'] = None\n"
        "from dial_runtime.cli import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "argv",
    [
        ("chat", "--agent", "ollama:llama3.1", "--domain", "dial_runtime.demo:NotesDomain"),
        ("demo", "--interactive"),
    ],
    ids=["chat", "demo-interactive"],
)
def test_the_terminal_surface_without_its_extra_says_how_to_install_it(argv: tuple[str, ...]) -> None:
    done = _run_without_the_terminal_extra(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"dial-runtime {' '.join(argv[:2]) if argv[0] == 'demo' else 'chat'}: the terminal surface needs rich and "
        "prompt_toolkit: pip install 'dial-runtime[terminal]'"
    ]


def test_the_quick_start_demo_needs_no_terminal_extra() -> None:
    done = _run_without_the_terminal_extra("demo")
    assert done.returncode == 0, done.stderr
    assert "you: add a note: buy milk" in done.stdout.splitlines()


# --- every failure is one line and a non-zero exit --------------------------------------------------------------

REPLIES = [
    '<dial><dial-suggest action="add-note">Add<dial-payload>{"text": "milk"}</dial-payload></dial-suggest></dial>',
    "<dial><dial-inform>Added.</dial-inform></dial>",
]

#: A module of domain factories that go wrong, importable from the directory the command runs in.
BAD_DOMAINS = """
from dial_runtime.demo import NotesDomain

def raises():
    raise RuntimeError("the notes database is down")

def a_list():
    return ["add-note"]

class ListedActions:
    actions = ["add-note"]

    def run(self, action, payload):
        return None

class MisspelledVocabulary(NotesDomain):
    vocabulary = {"add-note": {"payload_schema": {"type": "object"}}}
"""


@dataclasses.dataclass
class Case:
    """One command line run in a fresh directory: what it is given, and the exit status and words it must give."""

    argv: list[str]
    status: int
    says: str
    stdin: bytes = b""
    path: str | None = None  # PATH, when the case needs one without Graphviz on it
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)


def _database(tmp: Path) -> bytes:
    """The bytes of a real SQLite store holding the demo conversation."""
    path = tmp / "real.db"
    assert main(["import", str(RECORDINGS / "demo.jsonl"), "--store", f"sqlite:{path}"]) == 0
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return path.read_bytes()


RECORDINGS = Path(__file__).parents[1] / "recordings"
NOTES = "dial_runtime.demo:NotesDomain"
CHAT = ["chat", "--agent", "script:replies.json", "--domain", NOTES]
#: A chat with a model server no test reaches: refused before anything is sent.
MODEL_CHAT = ["chat", "--agent", "llamacpp:m@127.0.0.1:9", "--domain", NOTES]


def cases(tmp: Path, postgres_url: str) -> dict[str, Case]:
    real = _database(tmp)
    missing_db = postgres_url.replace("///postgres?", "///no_such_database?") + "&password=s3cret"
    return {
        "validate a binary file": Case(
            ["validate", "blob.bin"],
            1,
            "blob.bin is not UTF-8 text (byte 0xff",
            files={"blob.bin": bytes(range(256))[::-1]},
        ),
        "validate a Latin-1 file": Case(
            ["validate", "l1.xml"],
            1,
            "l1.xml is not UTF-8 text (byte 0xe9 at offset 22)",
            files={"l1.xml": "<dial><dial-inform>café</dial-inform></dial>".encode("latin-1")},
        ),
        "validate Latin-1 on stdin": Case(
            ["validate", "-"],
            1,
            "standard input is not UTF-8 text (byte 0xe9",
            stdin="<dial>é</dial>".encode("latin-1"),
        ),
        "validate a missing file": Case(["validate", "nowhere.xml"], 2, "cannot read nowhere.xml"),
        "diagrams without Graphviz": Case(
            ["diagrams", "--out", "d"],
            1,
            "Graphviz's dot is not on PATH: install Graphviz to draw the .svg files, or pass --no-svg",
            path="",
        ),
        "log on a file that is not a database": Case(
            ["log", "c", "--store", "sqlite:notes.txt"],
            1,
            "'notes.txt': the file is not a SQLite database",
            files={"notes.txt": b"shopping: milk\n" * 40},
        ),
        "log on a truncated database": Case(
            ["log", "demo", "--store", "sqlite:cut.db"],
            1,
            "SQLite store 'cut.db'",
            files={"cut.db": real[: len(real) // 2]},
        ),
        "log on a corrupted database": Case(
            ["log", "demo", "--store", "sqlite:bad.db"],
            1,
            "SQLite store 'bad.db'",
            files={"bad.db": real[:100] + b"\xff" * (len(real) - 100)},
        ),
        "log on a mistyped path": Case(
            ["log", "demo", "--store", "sqlite:typo.db"], 1, "SQLite store 'typo.db': no such database file"
        ),
        "export to a missing folder's database": Case(
            ["export", "demo", "--store", "sqlite:no/such/x.db"], 1, "no such database file"
        ),
        "chat on a missing folder": Case(
            [*CHAT, "--store", "sqlite:no/such/x.db", "--id", "k"],
            1,
            "the folder 'no/such' does not exist",
            files={"replies.json": json.dumps(REPLIES).encode()},
        ),
        "import into a missing folder": Case(
            ["import", str(RECORDINGS / "demo.jsonl"), "--store", "sqlite:no/x.db"],
            1,
            "the folder 'no' does not exist",
        ),
        "a PostgreSQL server that is not there": Case(
            ["log", "c", "--store", f"postgresql://ann:s3cret@/dial?host={tmp}&connect_timeout=3"],
            1,
            "PostgreSQL store 'postgresql://ann:***@/dial?host=",
        ),
        "a PostgreSQL server that refuses the database": Case(
            ["list", "--store", missing_db], 1, '"no_such_database" does not exist'
        ),
        "a domain whose factory raises": Case(
            [*CHAT, "--domain", "bad_domains:raises"],
            1,
            "--domain 'bad_domains:raises': raises() raised RuntimeError: the notes database is down",
            files={"bad_domains.py": BAD_DOMAINS.encode(), "replies.json": b"[]"},
        ),
        "a domain that is a list": Case(
            [*CHAT, "--domain", "bad_domains:a_list"],
            1,
            "a_list() returned a list, not a domain (no run method)",
            files={"bad_domains.py": BAD_DOMAINS.encode()},
        ),
        "a domain whose actions are a list": Case(
            ["replay", "--file", str(RECORDINGS / "demo.jsonl"), "--domain", "bad_domains:ListedActions"],
            1,
            "the domain's actions are a list, not a mapping",
            files={"bad_domains.py": BAD_DOMAINS.encode()},
        ),
        "a domain whose vocabulary has a key it does not read": Case(
            [*CHAT, "--domain", "bad_domains:MisspelledVocabulary"],
            1,
            "domain.vocabulary['add-note']: unknown key 'payload_schema' (did you mean 'schema'?)",
            files={"bad_domains.py": BAD_DOMAINS.encode(), "replies.json": b"[]"},
        ),
        "a domain module that does not exist": Case(
            [*CHAT, "--domain", "no_such_module:Domain"], 2, "cannot import no_such_module"
        ),
        "a script that is not there": Case(
            ["chat", "--agent", "script:gone.json", "--domain", "dial_runtime.demo:NotesDomain"],
            2,
            "script 'gone.json': cannot read it (No such file or directory)",
        ),
        "a script that is not a list of replies": Case(
            ["chat", "--agent", "script:r.json", "--domain", "dial_runtime.demo:NotesDomain"],
            2,
            "script 'r.json': reply 2 is int, not a string",
            files={"r.json": b'["hi", 3]'},
        ),
        "a malformed store URL": Case(
            ["log", "c", "--store", "mysql://ann:s3cret@h/d"], 2, "store URL 'mysql://ann:***@h/d' is not one of"
        ),
        "replay of a missing file": Case(
            ["replay", "--file", "gone.jsonl", "--domain", "dial_runtime.demo:NotesDomain"],
            2,
            "cannot read gone.jsonl: no such file",
        ),
        "chat with a grammar file that is not there": Case(
            [*CHAT, "--grammar", "gone.gbnf"], 2, "--grammar: cannot read gone.gbnf: No such file or directory"
        ),
        "chat with a grammar file that is not UTF-8": Case(
            [*CHAT, "--grammar", "latin.gbnf"],
            2,
            "--grammar: latin.gbnf is not UTF-8 text (at byte 10)",
            files={"latin.gbnf": 'root ::= "é"'.encode("latin-1")},
        ),
        "chat with generation settings for a script": Case(
            [*CHAT, "--temperature", "0"],
            2,
            "--server, --codec, --grammar and the generation settings are for a model server; script:FILE takes "
            "none",
            files={"replies.json": b"[]"},
        ),
        "chat with an unknown codec": Case(
            ["chat", "--agent", "llamacpp:m@127.0.0.1:9?codec=xml", "--domain", NOTES],
            2,
            "unknown codec 'xml'; use one of dial, tools, json",
        ),
        "chat with a grammar for tool calls": Case(
            [*MODEL_CHAT, "--codec", "tools", "--grammar", "domain"],
            2,
            "a grammar constrains DIAL replies; the tools codec has none",
        ),
        "chat with an unknown kind of server": Case(
            [*MODEL_CHAT, "--server", "tgi"],
            2,
            "server must be one of openai, llamacpp, vllm, ollama, got 'tgi'",
        ),
        "chat with no tokens to reply with": Case(
            [*MODEL_CHAT, "--max-tokens", "0"],
            2,
            "max_tokens must be a whole number of 1 or more, got 0",
        ),
        "serve with a grammar file that is not there": Case(
            ["serve", "--agent", "llamacpp:m", "--domain", NOTES, "--store", "memory:", "--grammar", "gone.gbnf"],
            2,
            "--grammar: cannot read gone.gbnf: No such file or directory",
        ),
        "chat with stdin not a terminal while a decision is pending": Case(
            [*CHAT, "--store", "sqlite:c.db", "--id", "k"],
            0,
            "sg-1 waits for your decision",
            stdin=b"add milk\n",
            files={"replies.json": json.dumps(REPLIES).encode()},
        ),
    }


CASE_NAMES = [
    "validate a binary file", "validate a Latin-1 file", "validate Latin-1 on stdin", "validate a missing file",
    "diagrams without Graphviz", "log on a file that is not a database", "log on a truncated database",
    "log on a corrupted database", "log on a mistyped path", "export to a missing folder's database",
    "chat on a missing folder", "import into a missing folder", "a PostgreSQL server that is not there",
    "a PostgreSQL server that refuses the database", "a domain whose factory raises", "a domain that is a list",
    "a domain whose actions are a list", "a domain whose vocabulary has a key it does not read",
    "a domain module that does not exist", "a script that is not there",
    "a script that is not a list of replies", "a malformed store URL", "replay of a missing file",
    "chat with a grammar file that is not there", "chat with a grammar file that is not UTF-8",
    "chat with generation settings for a script", "chat with an unknown kind of server",
    "chat with an unknown codec", "chat with a grammar for tool calls",
    "chat with no tokens to reply with", "serve with a grammar file that is not there",
    "chat with stdin not a terminal while a decision is pending",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_failure_is_one_line_and_a_non_zero_exit(name: str, tmp_path: Path, postgres_url: str) -> None:
    """The real console command, in a fresh directory: the exit status, the one line on standard error (or the
    words on screen, for a run that succeeds), never a traceback; nothing is created that was not there."""
    every = cases(tmp_path, postgres_url)
    assert sorted(every) == sorted(CASE_NAMES)
    case = every[name]
    work = tmp_path / "work"
    work.mkdir()
    for file_name, content in case.files.items():
        (work / file_name).write_bytes(content)
    before = sorted(path.name for path in work.iterdir())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    if case.path is not None:
        env["PATH"] = case.path
    done = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", *case.argv],
        cwd=work,
        input=case.stdin,
        capture_output=True,
        env=env,
        timeout=60,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback" not in out + err and "s3cret" not in out + err
    assert done.returncode == case.status, err
    if case.status:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"dial-runtime {case.argv[0]}: "), err
        assert case.says in lines[0], lines[0]
        if case.argv[0] in ("log", "export", "list", "replay"):
            assert sorted(path.name for path in work.iterdir()) == before, "a read-only command wrote nothing"
    else:
        assert case.says in out


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``dial-runtime log ... | head``: standard output closes before the command is done writing."""
    store = f"sqlite:{tmp_path / 'logs.db'}"
    assert main(["import", str(RECORDINGS / "demo.jsonl"), "--store", store]) == 0
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dial_runtime.cli", "log", "demo", "--store", store],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 141 and done.stderr == b""


def test_a_domain_is_found_in_the_current_directory_first(tmp_path: Path) -> None:
    (tmp_path / "todo_app.py").write_text(
        "from dial_runtime.demo import NotesDomain\n\ndef make():\n    return NotesDomain()\n", encoding="utf-8"
    )
    console = Path(sys.executable).with_name("dial-runtime")
    done = subprocess.run(
        [
            str(console),
            "replay",
            "--file",
            str(RECORDINGS / "demo.jsonl"),
            "--domain",
            "todo_app:make",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "identical to the recording" in done.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--agent", "a", "--domain", "m:f", "--store", "memory:", "--port", "x"], "argument --port"),
        (["serve", "--agent", "a", "--domain", "m:f", "--store", "memory:", "--max-turns", "2.5"], "--max-turns"),
        (["replay", "--file", "f.jsonl", "--decide-timeout", "soon"], "argument --decide-timeout"),
        (["log", "--store", "memory:"], "the following arguments are required: id"),
        (["chat", "--agent", "a"], "one of the arguments --domain --mcp is required"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_a_command_line_argparse_refuses_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("dial-runtime") and message in error, error
    assert error.rstrip().endswith("--help)")


def _chat(*argv: str, cwd: Path, words: str) -> subprocess.CompletedProcess[str]:
    """``dial-runtime chat`` run in ``cwd``, the person typing ``words`` (standard input is not a terminal)."""
    done = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "chat", *argv],
        cwd=cwd,
        input=words + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr
    return done


GBNF = 'root ::= "<dial><dial-inform>" [a-z ]{1,20} "</dial-inform></dial>"\n'


@pytest.mark.parametrize(
    ("options", "sent"),
    [
        (["--grammar", "domain", "--server", "llamacpp"], {"grammar": domain_grammar(NotesDomain()).gbnf}),
        (
            ["--grammar", "domain", "--server", "vllm"],
            {"structured_outputs": {"grammar": domain_grammar(NotesDomain()).gbnf}},
        ),
        (["--grammar", "rules.gbnf"], {"grammar": GBNF}),
        (["--grammar", "off"], {}),
    ],
    ids=["domain-llamacpp", "domain-vllm", "file", "off"],
)
def test_chat_sends_the_grammar_and_the_generation_settings_with_every_request(
    options: list[str], sent: dict[str, object], tmp_path: Path
) -> None:
    (tmp_path / "rules.gbnf").write_text(GBNF, encoding="utf-8")
    settings = ["--temperature", "0", "--top-p", "0.5", "--seed", "7", "--max-tokens", "64"]
    settings += ["--stop", "END", "--stop", "FIN"]
    with OpenAIServer(default="<dial><dial-inform>Noted.</dial-inform></dial>") as model:
        agent = f"{model.base_url}#m"
        _chat(
            "--agent",
            agent,
            "--domain",
            "dial_runtime.demo:NotesDomain",
            *options,
            *settings,
            cwd=tmp_path,
            words="hello",
        )
        (request,) = model.requests
    body = request.body
    assert {name: body[name] for name in ("temperature", "top_p", "seed", "max_tokens", "stop")} == {
        "temperature": 0.0, "top_p": 0.5, "seed": 7, "max_tokens": 64, "stop": ["END", "FIN"]
    }  # fmt: skip
    assert {name: body[name] for name in ("grammar", "structured_outputs") if name in body} == sent


@pytest.mark.llama
def test_chat_with_the_domains_grammar_on_a_real_model_replies_in_dial_only(llama: str, tmp_path: Path) -> None:
    """SmolLM2-135M on llama-server, constrained by ``--grammar domain``: every reply the store holds is one valid
    envelope with no issue, and its suggestions are put to the person."""
    port = llama.rpartition(":")[2]
    store = f"sqlite:{tmp_path / 'chat.db'}"
    options = ["--grammar", "domain", "--temperature", "0", "--seed", "1", "--max-tokens", "400"]
    done = _chat(
        "--agent", f"llamacpp:smollm2@127.0.0.1:{port}", "--domain", "dial_runtime.demo:NotesDomain",
        "--store", store, "--id", "c", *options, cwd=tmp_path, words="add a note: buy milk",
    )  # fmt: skip
    exported = subprocess.run(
        [sys.executable, "-m", "dial_runtime.cli", "export", "c", "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    events = [json.loads(line).get("event", {}) for line in exported.stdout.splitlines()]
    replies = [event["text"] for event in events if event.get("type") == "reply"]
    assert replies, done.stdout
    for reply in replies:
        assert validate(reply) == [], reply
        envelope = parse(reply)
        assert envelope is not None and not envelope.issues, reply
