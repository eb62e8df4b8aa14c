package apispec

import "testing"

func TestOpenAPISpecIsValid(t *testing.T) { Load(t) }
