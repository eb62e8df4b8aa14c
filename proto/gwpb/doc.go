// Package gwpb is the generated Go code of proto/gracewatch.proto, the wire
// schema between node agents and aggregators. Regenerate with `make proto`;
// CI checks that the committed code is current.
package gwpb

// SchemaVersion is the schema version this build speaks (Meta.schema,
// Envelope.schema). A receiver accepts any version: unknown fields are
// ignored, so agents of versions N and N+1 understand each other.
const SchemaVersion = 1
