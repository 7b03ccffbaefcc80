package configfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Format is a configuration file's syntax.
type Format string

// The formats a configuration file may be written in.
const (
	YAML Format = "YAML"
	JSON Format = "JSON"
)

// format is the file's syntax: its extension says, else its content (a
// JSON document starts with '{'; anything else is read as YAML, of which
// JSON is a subset). Errors name the format read, so that a YAML file is
// never reported as bad JSON.
func format(path string, data []byte) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return JSON
	case ".yaml", ".yml":
		return YAML
	}
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return JSON
	}
	return YAML
}

// parse decodes data into the generic form meshconfig.FromDocument reads,
// keeping numbers exact (json.Number).
func (f Format) parse(data []byte) (any, error) {
	jsonData := data
	if f == YAML {
		if moreThanOneYAMLDocument(data) {
			return nil, errMoreThanOneDocument
		}
		// Strict: a key given twice is an error, not a silent override.
		converted, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			return nil, trimYAMLError(err)
		}
		jsonData = converted
	}
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		if f == JSON {
			return nil, jsonPosition(data, err)
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errMoreThanOneDocument
	}
	return doc, nil
}

var errMoreThanOneDocument = errors.New("more than one document: the file holds one configuration")

// moreThanOneYAMLDocument reports a "---" separator after content: the
// YAML conversion would read the first document and ignore the rest.
func moreThanOneYAMLDocument(data []byte) bool {
	content := false
	for line := range bytes.Lines(data) {
		trimmed := bytes.TrimSpace(line)
		switch {
		case bytes.HasPrefix(line, []byte("---")) && (len(trimmed) == 3 || trimmed[3] == ' ' || trimmed[3] == '#'):
			if content {
				return true
			}
		case len(trimmed) > 0 && trimmed[0] != '#':
			content = true
		}
	}
	return false
}

// jsonPosition adds the line and column to a JSON syntax error, which
// encoding/json gives as a byte offset.
func jsonPosition(data []byte, err error) error {
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		return err
	}
	// Offset counts the offending byte.
	before := data[:min(max(int(syntax.Offset)-1, 0), len(data))]
	line := bytes.Count(before, []byte("\n")) + 1
	column := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Errorf("line %d, column %d: %w", line, column, err)
}

// trimYAMLError drops the conversion's wording ("error converting YAML to
// JSON: yaml: line 2: ..."), which names a JSON the user never wrote; the
// original stays wrapped.
func trimYAMLError(err error) error {
	msg := err.Error()
	for _, prefix := range []string{"error converting YAML to JSON: ", "yaml: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return &yamlError{msg: msg, err: err}
}

type yamlError struct {
	msg string
	err error
}

func (e *yamlError) Error() string { return e.msg }
func (e *yamlError) Unwrap() error { return e.err }
