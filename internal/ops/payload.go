package ops

import (
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// payloadString decodes fields[name] (a search attribute or memo field) as a string: "" when
// it is missing or holds no string.
func payloadString(fields map[string]*commonpb.Payload, name string) string {
	var s string
	if p, ok := fields[name]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
	}
	return s
}
