package xdsv1

// ReportSchemaVersion is the version of the Report schema (report.proto)
// that sidecars write and the operator reads; the operator refuses a
// report of another version. Both sides take it from here, so they cannot
// disagree.
const ReportSchemaVersion uint32 = 1
