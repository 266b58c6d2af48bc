"""Storage: which PostgreSQL (embedded server or ``RAG_DATABASE_URL``), engines, the schema and its Alembic
migrations (inside the package), URL masking, and read connections sharing one snapshot. Imports no stage."""
