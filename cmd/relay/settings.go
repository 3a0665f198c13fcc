package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// loadServeConfig reads the configuration of `relay serve` from its
// command line, the RELAY_* variables and the configuration file, and
// checks it; nothing is started or created. Help and mistakes are written
// to stderr.
func loadServeConfig(args []string, stderr io.Writer) (serveConfig, error) {
	fset := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cfg serveConfig
	cfg.flags(fset)
	configFile := fset.String(configFlag, "", "read settings from this JSON `file`: an object whose keys are the flags' names without dashes and whose values are strings, numbers or booleans (a list of strings for comma-separated ones); a flag on the command line wins over its RELAY_* variable, which wins over the file (RELAY_CONFIG)")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "Usage: relay serve [flags]\n\nStarts the relay: REST, Server-Sent Events and gRPC (h2c) on one address.\nEach setting comes from its flag, else its RELAY_* variable, else the --config file, else its default.\n\nFlags:")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return cfg, err
	}
	if fset.NArg() > 0 {
		return cfg, usageError{fmt.Sprintf("unexpected argument %q", fset.Arg(0))}
	}
	if err := applySettings(fset, *configFile); err != nil {
		return cfg, usageError{err.Error()}
	}
	if err := cfg.check(); err != nil {
		return cfg, usageError{err.Error()}
	}
	return cfg, nil
}

// configFlag is the flag of `relay serve` that names its configuration
// file; RELAY_CONFIG names it too.
const configFlag = "config"

// envName is the environment variable of a flag: RELAY_ and the flag's
// name in capitals with '_' for '-' (--max-conns: RELAY_MAX_CONNS).
func envName(flagName string) string {
	return "RELAY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applySettings gives every flag of fs that the command line left unset
// its value from the flag's RELAY_* variable, else from the configuration
// file (configFile, else RELAY_CONFIG; none when both are empty). A
// value is parsed exactly as the flag's own would be, so a malformed one
// is refused with the variable's or the file's setting's name instead of
// being replaced by the default. An empty variable counts as unset.
func applySettings(fs *flag.FlagSet, configFile string) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	if !onCommandLine[configFlag] {
		configFile = os.Getenv(envName(configFlag))
	}
	var file map[string]string
	if configFile != "" {
		var err error
		if file, err = readConfigFile(configFile, fs); err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] || f.Name == configFlag {
			return
		}
		if v := os.Getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s (flag -%s): %v", v, envName(f.Name), f.Name, err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %q in %s (flag -%s): %v", v, f.Name, configFile, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// readConfigFile reads a configuration file: one JSON object whose keys
// are the names of fs's flags (without dashes) and whose values are
// strings, numbers, booleans, or lists of strings that stand for a
// comma-separated value. It returns each value as the flag's text. An
// unknown key, a value of another kind or a malformed file is an error
// that names the file and the key.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the configuration file: %w", err)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("configuration file %s: not a JSON object: %v", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("configuration file %s: more than one JSON value", path)
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names) // the first mistake in a stable order
	out := make(map[string]string, len(raw))
	for _, name := range names {
		if name == configFlag || fs.Lookup(name) == nil {
			return nil, fmt.Errorf("configuration file %s: unknown setting %q: its keys are the flags of 'relay serve -h' without their dashes, such as \"listen\" or \"max-conns\"", path, name)
		}
		v, err := settingText(raw[name])
		if err != nil {
			return nil, fmt.Errorf("configuration file %s: %q: %v", path, name, err)
		}
		out[name] = v
	}
	return out, nil
}

// settingText is a configuration file's value as a flag's text.
func settingText(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		if v {
			return "true", nil
		}
		return "false", nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return "", errors.New("a list must hold strings only")
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a string, a number, a boolean or a list of strings")
}
