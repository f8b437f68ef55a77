import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_OK: _ClassVar[Outcome]
    OUTCOME_REJECTED: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]
    OUTCOME_ACCEPTED: _ClassVar[Outcome]

class ErrorClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CLASS_NONE: _ClassVar[ErrorClass]
    ERROR_CLASS_INVALID: _ClassVar[ErrorClass]
    ERROR_CLASS_UNKNOWN_NODE: _ClassVar[ErrorClass]
    ERROR_CLASS_NO_CAPACITY: _ClassVar[ErrorClass]
    ERROR_CLASS_TRANSIENT: _ClassVar[ErrorClass]
    ERROR_CLASS_INTERNAL: _ClassVar[ErrorClass]

class NodeEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_EVENT_KIND_UNSPECIFIED: _ClassVar[NodeEventKind]
    NODE_EVENT_KIND_DOWN: _ClassVar[NodeEventKind]
    NODE_EVENT_KIND_DRAIN: _ClassVar[NodeEventKind]
    NODE_EVENT_KIND_FAIL: _ClassVar[NodeEventKind]
    NODE_EVENT_KIND_UP: _ClassVar[NodeEventKind]
    NODE_EVENT_KIND_IDLE: _ClassVar[NodeEventKind]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_OFF: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_OK: Outcome
OUTCOME_REJECTED: Outcome
OUTCOME_FAILED: Outcome
OUTCOME_ACCEPTED: Outcome
ERROR_CLASS_NONE: ErrorClass
ERROR_CLASS_INVALID: ErrorClass
ERROR_CLASS_UNKNOWN_NODE: ErrorClass
ERROR_CLASS_NO_CAPACITY: ErrorClass
ERROR_CLASS_TRANSIENT: ErrorClass
ERROR_CLASS_INTERNAL: ErrorClass
NODE_EVENT_KIND_UNSPECIFIED: NodeEventKind
NODE_EVENT_KIND_DOWN: NodeEventKind
NODE_EVENT_KIND_DRAIN: NodeEventKind
NODE_EVENT_KIND_FAIL: NodeEventKind
NODE_EVENT_KIND_UP: NodeEventKind
NODE_EVENT_KIND_IDLE: NodeEventKind
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_OFF: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState

class NodeResult(_message.Message):
    __slots__ = ("node", "outcome", "error_class", "message")
    NODE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    node: str
    outcome: Outcome
    error_class: ErrorClass
    message: str
    def __init__(self, node: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., error_class: _Optional[_Union[ErrorClass, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ResumeNodesRequest(_message.Message):
    __slots__ = ("hostlist", "resume_file", "request_id", "wait")
    HOSTLIST_FIELD_NUMBER: _ClassVar[int]
    RESUME_FILE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    hostlist: str
    resume_file: str
    request_id: str
    wait: bool
    def __init__(self, hostlist: _Optional[str] = ..., resume_file: _Optional[str] = ..., request_id: _Optional[str] = ..., wait: _Optional[bool] = ...) -> None: ...

class ResumeNodesResponse(_message.Message):
    __slots__ = ("results", "request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[NodeResult]
    request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SuspendNodesRequest(_message.Message):
    __slots__ = ("hostlist", "request_id")
    HOSTLIST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    hostlist: str
    request_id: str
    def __init__(self, hostlist: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SuspendNodesResponse(_message.Message):
    __slots__ = ("results", "request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[NodeResult]
    request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumeFailedRequest(_message.Message):
    __slots__ = ("hostlist", "request_id")
    HOSTLIST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    hostlist: str
    request_id: str
    def __init__(self, hostlist: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumeFailedResponse(_message.Message):
    __slots__ = ("results", "request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[NodeResult]
    request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class NodeEventRequest(_message.Message):
    __slots__ = ("kind", "hostlist", "reason", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    HOSTLIST_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: NodeEventKind
    hostlist: str
    reason: str
    request_id: str
    def __init__(self, kind: _Optional[_Union[NodeEventKind, str]] = ..., hostlist: _Optional[str] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class NodeEventResponse(_message.Message):
    __slots__ = ("results", "request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[NodeResult]
    request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[NodeResult, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("hostlist", "stuck_after_s")
    HOSTLIST_FIELD_NUMBER: _ClassVar[int]
    STUCK_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    hostlist: str
    stuck_after_s: int
    def __init__(self, hostlist: _Optional[str] = ..., stuck_after_s: _Optional[int] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node", "pool", "slurm_state", "pod_phase", "pod_ip", "reason", "since", "template_hash", "pool_template_hash", "base_state", "state_flags", "reason_since", "stuck")
    NODE_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    SLURM_STATE_FIELD_NUMBER: _ClassVar[int]
    POD_PHASE_FIELD_NUMBER: _ClassVar[int]
    POD_IP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_HASH_FIELD_NUMBER: _ClassVar[int]
    POOL_TEMPLATE_HASH_FIELD_NUMBER: _ClassVar[int]
    BASE_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    REASON_SINCE_FIELD_NUMBER: _ClassVar[int]
    STUCK_FIELD_NUMBER: _ClassVar[int]
    node: str
    pool: str
    slurm_state: str
    pod_phase: str
    pod_ip: str
    reason: str
    since: _timestamp_pb2.Timestamp
    template_hash: str
    pool_template_hash: str
    base_state: str
    state_flags: _containers.RepeatedScalarFieldContainer[str]
    reason_since: _timestamp_pb2.Timestamp
    stuck: str
    def __init__(self, node: _Optional[str] = ..., pool: _Optional[str] = ..., slurm_state: _Optional[str] = ..., pod_phase: _Optional[str] = ..., pod_ip: _Optional[str] = ..., reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., template_hash: _Optional[str] = ..., pool_template_hash: _Optional[str] = ..., base_state: _Optional[str] = ..., state_flags: _Optional[_Iterable[str]] = ..., reason_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stuck: _Optional[str] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class PoolBreaker(_message.Message):
    __slots__ = ("pool", "state", "failures", "window_s", "pause_s", "recent_failures", "paused_until", "last_reason")
    POOL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    PAUSE_S_FIELD_NUMBER: _ClassVar[int]
    RECENT_FAILURES_FIELD_NUMBER: _ClassVar[int]
    PAUSED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    LAST_REASON_FIELD_NUMBER: _ClassVar[int]
    pool: str
    state: BreakerState
    failures: int
    window_s: float
    pause_s: float
    recent_failures: int
    paused_until: _timestamp_pb2.Timestamp
    last_reason: str
    def __init__(self, pool: _Optional[str] = ..., state: _Optional[_Union[BreakerState, str]] = ..., failures: _Optional[int] = ..., window_s: _Optional[float] = ..., pause_s: _Optional[float] = ..., recent_failures: _Optional[int] = ..., paused_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_reason: _Optional[str] = ...) -> None: ...

class ListPoolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPoolsResponse(_message.Message):
    __slots__ = ("pools", "leadership", "gang_scheduling")
    POOLS_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    GANG_SCHEDULING_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[PoolBreaker]
    leadership: Leadership
    gang_scheduling: GangScheduling
    def __init__(self, pools: _Optional[_Iterable[_Union[PoolBreaker, _Mapping]]] = ..., leadership: _Optional[_Union[Leadership, _Mapping]] = ..., gang_scheduling: _Optional[_Union[GangScheduling, _Mapping]] = ...) -> None: ...

class GangScheduling(_message.Message):
    __slots__ = ("on", "api_version", "why_off")
    ON_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    WHY_OFF_FIELD_NUMBER: _ClassVar[int]
    on: bool
    api_version: str
    why_off: str
    def __init__(self, on: _Optional[bool] = ..., api_version: _Optional[str] = ..., why_off: _Optional[str] = ...) -> None: ...

class Leadership(_message.Message):
    __slots__ = ("enabled", "identity", "lease", "leader", "leading", "since", "transitions")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    identity: str
    lease: str
    leader: str
    leading: bool
    since: _timestamp_pb2.Timestamp
    transitions: int
    def __init__(self, enabled: _Optional[bool] = ..., identity: _Optional[str] = ..., lease: _Optional[str] = ..., leader: _Optional[str] = ..., leading: _Optional[bool] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., transitions: _Optional[int] = ...) -> None: ...

class ResumePoolRequest(_message.Message):
    __slots__ = ("pool", "request_id")
    POOL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    pool: str
    request_id: str
    def __init__(self, pool: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResumePoolResponse(_message.Message):
    __slots__ = ("pool", "was_paused", "request_id")
    POOL_FIELD_NUMBER: _ClassVar[int]
    WAS_PAUSED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    pool: PoolBreaker
    was_paused: bool
    request_id: str
    def __init__(self, pool: _Optional[_Union[PoolBreaker, _Mapping]] = ..., was_paused: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...
