package devserver

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// SearchAttributeKeys are the custom search attributes the dev server registers: the
// one place to add one (docker-compose.yml's temporal-namespace job lists them too).
var SearchAttributeKeys = []temporal.SearchAttributeKey{
	workflows.SAStatus,
	workflows.SAOriginalQueue,
	workflows.SARetryCount,
	workflows.SANextRetryTime,
	workflows.SAErrorCategory,
	workflows.SAPolicy,
	workflows.SATenant,
	workflows.SADeadAt,
	workflows.SAEventType,
	workflows.SABreakerState,
	workflows.SAProducer,
	workflows.SAConsumerService,
	workflows.SAErrorType,
	workflows.SADeadLetterIDs,
}

// cliTypes maps value types to the names `temporal` accepts.
var cliTypes = map[enumspb.IndexedValueType]string{
	enumspb.INDEXED_VALUE_TYPE_TEXT:         "Text",
	enumspb.INDEXED_VALUE_TYPE_KEYWORD:      "Keyword",
	enumspb.INDEXED_VALUE_TYPE_INT:          "Int",
	enumspb.INDEXED_VALUE_TYPE_DOUBLE:       "Double",
	enumspb.INDEXED_VALUE_TYPE_BOOL:         "Bool",
	enumspb.INDEXED_VALUE_TYPE_DATETIME:     "Datetime",
	enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}

// CLIType is the `temporal` CLI's name of a search attribute key's type
// (Keyword, Int, Datetime, ...).
func CLIType(k temporal.SearchAttributeKey) string {
	if t, ok := cliTypes[k.GetValueType()]; ok {
		return t
	}
	panic("devserver: search attribute " + k.GetName() + " has an unsupported type " + k.GetValueType().String())
}

// SearchAttributeFlags are the values of start-dev's --search-attribute flags,
// "Name=Type", one per entry of SearchAttributeKeys.
func SearchAttributeFlags() []string {
	out := make([]string, 0, len(SearchAttributeKeys))
	for _, k := range SearchAttributeKeys {
		out = append(out, k.GetName()+"="+CLIType(k))
	}
	return out
}
