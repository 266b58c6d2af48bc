"""The shapes rag_pipeline returns: one pydantic model per aggregate, the error kinds, the metric names. This
package imports nothing of rag_pipeline but settings."""
