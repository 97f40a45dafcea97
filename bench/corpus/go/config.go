// Package config reads INI-style configuration files.
//
// A file consists of optional global keys followed by [sections]:
//
//	name = demo
//	[server]
//	host = 0.0.0.0
//	port = 8080          ; trailing comments are allowed
//	timeout = 2.5s
//
// Values may reference other keys with ${section.key} and are expanded after
// the whole file has been read.
package config

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// ParseError describes a problem at a specific line of the input.
type ParseError struct {
	File string
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// Config holds every key under its fully qualified name, "section.key".
// Global keys have no section prefix.
type Config struct {
	values map[string]string
	order  []string
}

// New returns an empty configuration.
func New() *Config {
	return &Config{values: make(map[string]string)}
}

// Load opens and parses the file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads configuration text from r; name is used in error messages.
func Parse(r io.Reader, name string) (*Config, error) {
	cfg := New()
	scanner := bufio.NewScanner(r)
	section := ""
	lineNo := 0
	for scanner.Scan() {
		lineNo++
		line := strings.TrimSpace(stripComment(scanner.Text()))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				return nil, &ParseError{name, lineNo, "unterminated section header"}
			}
			section = strings.TrimSpace(line[1 : len(line)-1])
			if section == "" {
				return nil, &ParseError{name, lineNo, "empty section name"}
			}
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			return nil, &ParseError{name, lineNo, fmt.Sprintf("expected key = value, got %q", line)}
		}
		key := strings.TrimSpace(line[:eq])
		value := unquote(strings.TrimSpace(line[eq+1:]))
		if key == "" {
			return nil, &ParseError{name, lineNo, "missing key before '='"}
		}
		if section != "" {
			key = section + "." + key
		}
		if _, exists := cfg.values[key]; exists {
			return nil, &ParseError{name, lineNo, fmt.Sprintf("duplicate key %q", key)}
		}
		cfg.Set(key, value)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("config: reading %s: %w", name, err)
	}
	if err := cfg.expand(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// stripComment removes a ';' or '#' comment that is not inside quotes.
func stripComment(line string) string {
	inQuotes := false
	for i, ch := range line {
		switch {
		case ch == '"':
			inQuotes = !inQuotes
		case (ch == ';' || ch == '#') && !inQuotes:
			return line[:i]
		}
	}
	return line
}

func unquote(value string) string {
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		if s, err := strconv.Unquote(value); err == nil {
			return s
		}
	}
	return value
}

// expand replaces ${name} references, detecting reference cycles.
func (c *Config) expand() error {
	for _, key := range c.order {
		resolved, err := c.resolve(key, map[string]bool{})
		if err != nil {
			return err
		}
		c.values[key] = resolved
	}
	return nil
}

func (c *Config) resolve(key string, visiting map[string]bool) (string, error) {
	if visiting[key] {
		return "", fmt.Errorf("config: reference cycle through %q", key)
	}
	visiting[key] = true
	defer delete(visiting, key)

	value := c.values[key]
	var out strings.Builder
	for {
		start := strings.Index(value, "${")
		if start < 0 {
			out.WriteString(value)
			break
		}
		end := strings.IndexByte(value[start:], '}')
		if end < 0 {
			return "", fmt.Errorf("config: unterminated reference in %q", key)
		}
		ref := value[start+2 : start+end]
		if _, ok := c.values[ref]; !ok {
			return "", fmt.Errorf("config: %q refers to unknown key %q", key, ref)
		}
		sub, err := c.resolve(ref, visiting)
		if err != nil {
			return "", err
		}
		out.WriteString(value[:start])
		out.WriteString(sub)
		value = value[start+end+1:]
	}
	return out.String(), nil
}

// Set stores a value, remembering insertion order for new keys.
func (c *Config) Set(key, value string) {
	if _, exists := c.values[key]; !exists {
		c.order = append(c.order, key)
	}
	c.values[key] = value
}

// String returns the value of key or def if it is absent.
func (c *Config) String(key, def string) string {
	if v, ok := c.values[key]; ok {
		return v
	}
	return def
}

// Int returns key parsed as an integer.
func (c *Config) Int(key string, def int) (int, error) {
	v, ok := c.values[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def, fmt.Errorf("config: %s: %q is not an integer", key, v)
	}
	return n, nil
}

// Bool accepts true/false, yes/no, on/off and 1/0.
func (c *Config) Bool(key string, def bool) (bool, error) {
	v, ok := c.values[key]
	if !ok {
		return def, nil
	}
	switch strings.ToLower(v) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return def, fmt.Errorf("config: %s: %q is not a boolean", key, v)
}

// Duration parses values such as "250ms" or "1m30s".
func (c *Config) Duration(key string, def time.Duration) (time.Duration, error) {
	v, ok := c.values[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("config: %s: %w", key, err)
	}
	return d, nil
}

// Section returns the keys of one section, without the section prefix.
func (c *Config) Section(name string) map[string]string {
	prefix := name + "."
	out := make(map[string]string)
	for key, value := range c.values {
		if strings.HasPrefix(key, prefix) {
			out[strings.TrimPrefix(key, prefix)] = value
		}
	}
	return out
}
