"""Exceptions raised by multiworld_native.

The runtime's status codes map to Python exceptions as follows:

* ``world_broken`` -> :class:`BrokenWorldError` (which world, why, which peer, when)
* ``timeout`` -> the built-in :class:`TimeoutError`
* ``invalid_argument`` -> the built-in :class:`ValueError`
* anything else (``not_found``, ``invalid_usage``, ``aborted``, ``io_error``, ...) ->
  :class:`MultiworldError` with the code name in ``code``.
"""


class MultiworldError(RuntimeError):
    """An error of the multiworld runtime; ``code`` is its code name (e.g. ``"not_found"``)."""

    def __init__(self, message, code="unknown"):
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return (type(self), (str(self), self.code))


class BrokenWorldError(MultiworldError):
    """A world failed; every pending and later operation on it raises this.

    Attributes:
        world: the world's name.
        cause: why it broke: ``"peer_died"``, ``"peer_silent"``, ``"op_timeout"``,
            ``"backend_error"``, ``"protocol_error"``, ``"remote_broken"``, ``"peer_left"``, ...
        rank: the member blamed, or -1 when none is known.
        detected_at: when this process detected the break, in seconds of the monotonic clock
            (comparable with :func:`time.monotonic`).
        detail: a human-readable explanation.
    """

    def __init__(self, message, world, cause, rank=-1, detected_at=0.0, detail=""):
        super().__init__(message, "world_broken")
        self.world = world
        self.cause = cause
        self.rank = rank
        self.detected_at = detected_at
        self.detail = detail

    def __reduce__(self):
        return (type(self), (str(self), self.world, self.cause, self.rank, self.detected_at,
                             self.detail))
