"""The tag protocol shared by the rollout engine, the rewards and the scripted experts (RAPO.md §1, §3).

One place for the texts the environment inserts, so what the engine writes is exactly what rewards
strip and what the experts imitate.
"""

TOOL_TAGS = ("python", "search")
"""Tags of the built-in tools."""

RESULT_TEMPLATE = "\n<result>\n{output}\n</result>\n"
"""How a tool's output is shown to the policy (forced tokens)."""

RETRIEVE_PREFACE = "Additional context is enclosed in <retrieve> </retrieve> tags. Use it if helpful."
"""The sentence that announces a retrieved step."""

RETRIEVE_TEMPLATE = "\n" + RETRIEVE_PREFACE + "\n<retrieve>\n{text}\n</retrieve>\n"
"""How a retrieved step (or the fallback text) is inserted (forced tokens)."""
