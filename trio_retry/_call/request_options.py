"""The per-call options of every verb (:class:`RequestOptions`): their one table.

A module of its own, with nothing but typing behind it at run time, so that the client's module
can hold the table its verbs' signatures name (``**options: Unpack[RequestOptions]``) without
importing what checks the options (:mod:`.prepare`, imported when the first client is entered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypedDict

if TYPE_CHECKING:
    from .._core.hedging import Hedging
    from .._core.idempotency import Idempotency
    from .._core.policy import RetryPolicy
    from .._core.replay import Body
    from .._models import HeaderTypes
    from .._reconcile import Reconciler
    from .client_options import AuthTypes

__all__ = ["Files", "FormData", "ParamValue", "QueryParams", "RequestOptions"]


#: One query or form value (``True``/``False`` are sent as ``true``/``false``).
ParamValue: TypeAlias = "str | int | float | bool"
#: ``params=``: names to a value, a list of values (repeated), or ``None`` (left out); or pairs.
QueryParams: TypeAlias = (
    "Mapping[str, ParamValue | Sequence[ParamValue] | None] | Sequence[tuple[str, ParamValue]]"
)
#: ``data=``: form fields, names to a value or a list of values.
FormData: TypeAlias = "Mapping[str, ParamValue | Sequence[ParamValue]]"
#: ``files=``: field names to a file object, a path, or ``(filename, body[, content_type])``.
Files: TypeAlias = "Mapping[str, object]"


class RequestOptions(TypedDict, total=False):
    """The per-call options of ``request``, ``stream`` and every verb (all optional)."""

    headers: HeaderTypes
    params: QueryParams | None
    content: Body | None
    data: FormData | None
    files: Files | None
    json: object
    deadline: float | None
    idempotency: Idempotency | None
    idempotency_key: str | bool | None
    retry: RetryPolicy | None
    follow_redirects: bool | None
    cookies: Mapping[str, str] | None
    auth: AuthTypes | tuple[str, str] | None
    hedging: Hedging | bool | None
    resume: bool | None
    reconcile: Reconciler | None
