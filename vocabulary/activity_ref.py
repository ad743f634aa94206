"""A typed reference to an activity: its name, input type and output type, declared together.

Workflow and middleware code may not import activity functions (they pull in boto3, kubernetes and HTTP
clients), so Temporal's usual typed call by function reference is out of reach; a bare name says nothing about
types. An :class:`ActivityRef` carries them, so ``mypy --strict`` checks both ends: callers go through
``middlewares/_activity_call.call``, which takes the argument as the input type and returns the output type, and
implementations register with ``activities/contract.implements``; ``tests/test_activity_contracts.py`` checks
that every reference has exactly one implementation whose annotations match.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")


class ActivityRef(str, Generic[InputT, OutputT]):
    """The activity's type name, with its one input and one output type (``type(None)`` for none).

    A ``str`` whose value is the name, so it goes wherever a name went: ``RunContext.call`` and
    ``workflow.execute_activity`` take it as the activity type, and histories keep the same strings.
    """

    input: type[InputT]
    output: type[OutputT]

    def __new__(cls, name: str, input: type[InputT], output: type[OutputT]) -> ActivityRef[InputT, OutputT]:
        ref = super().__new__(cls, name)
        ref.input = input
        ref.output = output
        return ref

    def __getnewargs__(self) -> tuple[Any, ...]:
        # copy and pickle rebuild a str subclass from these; str's own would drop the types.
        return (str(self), self.input, self.output)

    @property
    def name(self) -> str:
        return str(self)
