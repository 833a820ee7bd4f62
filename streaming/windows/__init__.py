"""Windows: the specifications (``TimeWindows``, ``SlidingWindows``, ``SessionWindows``, ``JoinWindows``),
``Window``/``Windowed`` keys, and the serdes of windowed keys."""

from streaming.windows.serdes import SessionWindowedSerde, WindowedSerde, WindowedSerdes
from streaming.windows.specs import JoinWindows, SessionWindows, SlidingWindows, TimeWindows
from streaming.windows.window import Window, Windowed

__all__ = ["JoinWindows", "SessionWindowedSerde", "SessionWindows", "SlidingWindows", "TimeWindows", "Window",
           "Windowed", "WindowedSerde", "WindowedSerdes"]
