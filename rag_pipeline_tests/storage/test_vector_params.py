"""A batch of vectors sent as one binary ``vector[]`` parameter reaches the server bit for bit, as the text form
does; an empty batch is an empty array."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa

from rag_pipeline.storage.vector_params import VectorArray

ROUND_TRIP = "SELECT ord, vector_send(v) AS data FROM unnest(CAST(:vs AS vector[])) WITH ORDINALITY AS t(v, ord)"


def _sent(conn, vectors) -> list[bytes]:
    return [bytes(r.data) for r in conn.execute(sa.text(ROUND_TRIP + " ORDER BY ord"), {"vs": vectors})]


def test_binary_vectors_reach_the_server_bit_for_bit(engine):
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((5, 512)).astype(np.float32)
    rows[0, :3] = [np.float32(1e-38), np.float32(-0.0), np.nextafter(np.float32(1), np.float32(2))]
    with engine.connect() as conn:
        binary, text = _sent(conn, VectorArray(rows)), _sent(conn, list(rows))  # a list goes as text
        empty = conn.execute(sa.text("SELECT cardinality(CAST(:vs AS vector[]))"),
                             {"vs": VectorArray(np.empty((0, 512), dtype=np.float32))}).scalar_one()
    assert binary == text
    assert [np.frombuffer(b, dtype=">f4", offset=4).tobytes() for b in binary] == \
        [r.astype(">f4").tobytes() for r in rows]
    assert empty == 0
