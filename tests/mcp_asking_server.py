"""An MCP server of the tests' own whose tools ask the user in the middle of a call (elicitation), as the ``mcp``
SDK's resolvers do: over the 2026-07-28 protocol as ``input_required`` rounds, over the handshake versions as an
``elicitation/create`` request to the client.

``python tests/mcp_asking_server.py --ledger FILE`` serves over stdio and appends each effect to ``FILE``, one
JSON object a line:

- ``rename_branch(branch)`` asks what to rename the branch to (a name, required; ``force``, a yes/no with a
  default); accepted, it renames (an effect) and says so; declined or cancelled, it does nothing and says which;
- ``open_account(owner)`` asks for the owner's plan (a choice of three) and age (an integer, at least 18), then
  asks again to confirm: two questions in one call;
- ``sign_in(service)`` asks the user to open a page (URL mode: the handshake versions only, as the SDK's
  resolvers ask in form mode).
"""

from __future__ import annotations

import argparse
import json
from typing import Annotated, Literal

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from pydantic import BaseModel, Field

server = MCPServer("asking", instructions="Renames branches and opens accounts, asking the user as it goes.")
ledger = ""


def effect(tool: str, **detail: object) -> None:
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": tool, **detail}) + "\n")


class NewName(BaseModel):
    name: str = Field(description="The branch's new name", min_length=1)
    force: bool = Field(default=False, description="Overwrite a branch of that name")


class Plan(BaseModel):
    plan: Literal["free", "team", "enterprise"] = Field(description="The plan")
    age: int = Field(description="The owner's age", ge=18)


class Confirm(BaseModel):
    sure: bool = Field(description="Open it")


def ask_name(branch: str) -> Elicit[NewName]:
    return Elicit(f"What should the branch {branch!r} be called?", NewName)


def ask_plan(owner: str) -> Elicit[Plan]:
    return Elicit(f"Which plan is {owner}'s account on, and how old is {owner}?", Plan)


def ask_sure(owner: str) -> Elicit[Confirm]:
    return Elicit(f"Open the account for {owner} now?", Confirm)


@server.tool(description="Rename a branch, asking the user for the new name.")
def rename_branch(branch: str, answer: Annotated[ElicitationResult[NewName], Resolve(ask_name)]) -> str:
    if not isinstance(answer, AcceptedElicitation):
        return f"not renamed: the user chose {answer.action}"
    effect("rename_branch", branch=branch, name=answer.data.name, force=answer.data.force)
    return f"renamed {branch} to {answer.data.name}"


@server.tool(description="Open an account, asking the user for its plan and then to confirm.")
def open_account(
    owner: str,
    plan: Annotated[ElicitationResult[Plan], Resolve(ask_plan)],
    sure: Annotated[ElicitationResult[Confirm], Resolve(ask_sure)],
) -> str:
    if not isinstance(plan, AcceptedElicitation) or not isinstance(sure, AcceptedElicitation):
        return "not opened"
    if not sure.data.sure:
        return "not opened: the user said no"
    effect("open_account", owner=owner, plan=plan.data.plan, age=plan.data.age)
    return f"opened {owner}'s {plan.data.plan} account"


@server.tool(description="Sign in to a service, asking the user to open its page.")
async def sign_in(service: str, ctx: Context) -> str:
    answer = await ctx.elicit_url(f"Sign in to {service}", f"https://example.com/{service}/login", "sign-in-1")
    effect("sign_in", service=service, action=answer.action)
    return f"sign-in: {answer.action}"


def main() -> None:
    global ledger
    parser = argparse.ArgumentParser()
    parser.add_argument("--ledger", required=True)
    ledger = parser.parse_args().ledger
    server.run("stdio")


if __name__ == "__main__":
    main()
