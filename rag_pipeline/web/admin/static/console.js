// rag_pipeline admin console: sortable tables, client-side filters, live run status. Vanilla JS, no build.
"use strict";
