"""A batch of question vectors as one binary ``vector[]`` parameter.

The legs and the miss diagnosis send a batch's question vectors as ``CAST(:query_vectors AS vector[])``. As a list
of arrays, psycopg dumps the array as text, each vector through pgvector's text form (a decimal string per float),
a few hundred milliseconds of Python per click. :class:`VectorArray` is dumped instead in PostgreSQL's binary array
format, each element in pgvector's binary form (``vector_recv``: int16 dimension, int16 unused, big-endian float4
values), built by numpy in one pass. The server gets the same float4 values bit for bit (the text form round-trips
exactly as well: shortest decimal of each float32, read back with ``strtof``)."""

from __future__ import annotations

import struct

import numpy as np
from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo


class VectorArray:
    """``rows`` (n × dimension, float32) as one ``vector[]`` parameter."""

    __slots__ = ("rows",)

    def __init__(self, rows) -> None:
        rows = np.asarray(rows, dtype=np.float32)
        self.rows = rows.reshape(len(rows), -1) if rows.ndim != 2 else rows


def encode(rows: np.ndarray, element_oid: int) -> bytes:
    """PostgreSQL's binary array format of ``rows`` as ``vector`` elements (one dimension, lower bound 1)."""
    n, dimension = rows.shape
    if n == 0:
        return struct.pack("!iii", 0, 0, element_oid)
    body = np.empty(n, dtype=[("len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (dimension,))])
    body["len"], body["dim"], body["unused"], body["x"] = 4 + 4 * dimension, dimension, 0, rows
    return struct.pack("!iiiii", 1, 0, element_oid, n, 1) + body.tobytes()


def register(connection: Connection) -> None:
    """Let ``connection`` send :class:`VectorArray` parameters (after pgvector's ``register_vector``)."""
    info = TypeInfo.fetch(connection, "vector")
    if info is None:
        return
    element, array = info.oid, info.array_oid

    class VectorArrayDumper(Dumper):
        format = Format.BINARY
        oid = array

        def dump(self, obj: VectorArray) -> bytes:
            return encode(obj.rows, element)

    connection.adapters.register_dumper(VectorArray, VectorArrayDumper)
