package export

// CheckEveryRow makes e insert every row through INSERT … ON CONFLICT DO
// NOTHING (no COPY), as the exporter did before it copied: the other side of
// BenchmarkExport's side-by-side.
func CheckEveryRow(e *Exporter) { e.store.conflictOnly = true }
