"""SQL pipelines, in one room (``transform: {sql: ...}``, docs/semantics.md): the query as the run applies it
(``runtime``) and the same query analyzed over an empty input before anything runs (``analyzer``,
``lockstep validate --connect``). Both tell Spark's refusal the same way, naming the spec, the place in
the query and the way out."""

__all__ = [
    "analyzer", "runtime",
]
