"""``dial-runtime decide``: decide on a suggestion that waits in a stored conversation, as the panel does."""

from __future__ import annotations

import argparse
import json
from typing import Any

import trio
import trio.testing

from .._command import _CommandError, _usage
from ..domains.loading import load_domain
from ..errors import DialError
from ..stores.urls import open_url, read_log
from ..views.person import approval_refused, project
from .common import STORE_HELP, add_mcp_options, check_mcp_options, login_name


def _decide(args: argparse.Namespace) -> int:
    """``dial-runtime decide``: take a decision on a suggestion that waits in a stored conversation, as the panel
    and the terminal take one (the same log, the same checks, under the conversation's lock), logged ``via
    cli``; the conversation then carries on with its agent and domain. Prints how the suggestion stands."""

    from ..decisions.deadlines import conversation_opener
    from ..runtime.records import Accept, Dismiss, Edit
    from ..web.serve import agent_factory

    if args.decision == "edit" and args.payload is None:
        _usage("an edit needs the edited payload: --payload JSON")
    if args.decision != "edit" and args.payload is not None:
        _usage("--payload goes with edit")
    decision: Accept | Dismiss | Edit
    if args.decision == "accept":
        decision = Accept()
    elif args.decision == "dismiss":
        decision = Dismiss()
    else:
        try:
            decision = Edit(json.loads(args.payload))  # json's errors name the column
        except ValueError as error:
            _usage(f"--payload is not JSON: {error}")
    check_mcp_options(args)
    domain = load_domain(args.domain) if args.mcp is None else None
    # The conversation is there (read only: a mistyped store creates nothing), and the card as it was seen.
    shown = project(read_log(args.store, args.id)).card(args.suggestion)
    store = open_url(args.store)

    async def work() -> str:
        try:
            if domain is not None:
                return await decide(domain)
            from ..doors.elicitation import Elicitations
            from ..web.serve import McpServer  # an MCP server's tools, connected for the decision's length

            upstream = McpServer(server=args.mcp, trust_read_only=args.trust_read_only, log=args.mcp_log)
            try:  # what the server asks while the decision runs its tool is a card for someone to answer
                async with upstream.connected(Elicitations(store)) as served:
                    return await decide(served, questions=True)
            except ValueError as error:  # a server that cannot be started or reached
                raise _CommandError(str(error)) from None
        finally:
            await store.aclose()

    async def decide(domain: Any, questions: bool = False) -> str:
        # Built as serve builds one: a domain factory's domain (and the agent) only if a call uses it; over an
        # MCP server, the cards of its questions too (elicit:...), with the questions' domain.
        agent = agent_factory(args.agent, domain)
        if questions:
            from ..doors.elicitation import answering_questions

            domain, agent = answering_questions(domain, agent)
        open_conversation = conversation_opener(store, agent=agent, domain=domain)
        try:
            conversation = await open_conversation(args.id)
            try:
                result = await conversation.decide(
                    args.suggestion, decision, by=args.by, shown=args.shown, via="cli", roles=args.roles
                )
            finally:
                close = getattr(conversation.agent, "aclose", None)  # the agent built on first use, if it was
                if close is not None:
                    await close()
        except DialError as error:  # already decided, a payload changed, busy, not waiting
            raise _CommandError(str(error)) from None
        card = project(conversation.log).card(args.suggestion)
        refused = approval_refused(shown, card)
        if refused is not None:
            raise _CommandError(f"{args.suggestion} still waits: {refused}")
        told = card.outcome if card is not None and card.outcome else "waiting"
        approvals = ""
        if card is not None and card.approvals_needed:
            approvals = f" ({len(card.approvers)} of {card.approvals_needed} approvals)"
        return f"{args.suggestion}: {told}{approvals}; the call ended {result.status}"

    print(trio.run(work))
    return 0


def register(commands: Any) -> None:
    """Add ``decide``."""
    deciding = commands.add_parser(
        "decide", help="decide on a suggestion that waits in a stored conversation, as the panel does"
    )
    deciding.add_argument("id", help="the conversation's id")
    deciding.add_argument("suggestion", help="the suggestion's id (sg-1, ...)")
    deciding.add_argument("decision", choices=["accept", "dismiss", "edit"])
    deciding.add_argument("--store", required=True, metavar="URL", help=STORE_HELP)
    deciding.add_argument(
        "--agent",
        required=True,
        metavar="URI",
        help="the agent, as serve's (for what follows; outside: for a conversation of dial-runtime mcp)",
    )
    served = deciding.add_mutually_exclusive_group(required=True)
    served.add_argument("--domain", metavar="MODULE:FACTORY", help="the domain, as serve's")
    add_mcp_options(deciding, served)
    deciding.add_argument(
        "--as", dest="by", metavar="NAME", default=login_name(), help="who decides (default: your login name)"
    )
    deciding.add_argument(
        "--role", dest="roles", action="append", default=[], metavar="ROLE", help="a role you hold (repeatable)"
    )
    deciding.add_argument("--payload", metavar="JSON", help="the edited payload (with edit)")
    deciding.add_argument(
        "--shown", metavar="DIGEST", help="the digest of the payload you saw (refused if it changed since)"
    )
    deciding.set_defaults(run=_decide)
