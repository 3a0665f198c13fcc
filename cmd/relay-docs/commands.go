package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// machineDefaults are the flags whose default the relay computes from the
// machine it runs on; their pages say how instead of one machine's number.
var machineDefaults = map[string]string{
	"max-conns": "three quarters of the process's open-file limit",
}

// commandPages renders the command-line reference from `relay --help` and
// each command's own -h, and the configuration table from the flags of
// `relay serve`.
func commandPages(relayBin string) (cli, config []byte, err error) {
	top, err := help(relayBin, "--help")
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	b.WriteString(generatedNote)
	b.WriteString("# Command line\n\n")
	b.WriteString("Every command of `relay` with its own help, as `relay <command> -h` prints it. Every flag of `relay serve` has a `RELAY_*` environment variable; [Configuration](configuration.md) lists them in one table.\n\n")
	b.WriteString("```text\n" + top + "```\n\n")
	var serveHelp string
	for _, cmd := range commands(top) {
		if cmd == "version" {
			continue // its -h prints the version, which is the build's, not the documentation's
		}
		out, err := help(relayBin, append(strings.Fields(cmd), "-h")...)
		if err != nil {
			return nil, nil, err
		}
		out = fixMachineDefaults(out)
		if cmd == "serve" {
			serveHelp = out
		}
		fmt.Fprintf(&b, "## relay %s\n\n```text\n%s```\n\n", cmd, out)
	}
	if serveHelp == "" {
		return nil, nil, fmt.Errorf("relay --help lists no serve command")
	}
	config, err = configPage(serveHelp)
	return bytes.TrimRight(b.Bytes(), "\n"), config, err
}

// help runs the relay with args in an environment without RELAY_*
// variables and returns what it printed, whatever its exit status (the
// flag package exits 0 on -h, other commands may exit 2).
func help(relayBin string, args ...string) (string, error) {
	cmd := exec.Command(relayBin, args...)
	cmd.Env = cleanEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		return "", err
	}
	if out.Len() == 0 {
		return "", fmt.Errorf("relay %s printed nothing", strings.Join(args, " "))
	}
	s := out.String()
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s, nil
}

// commandLine matches a command in the usage of `relay --help`.
var commandLine = regexp.MustCompile(`^\s+relay ([a-z][a-z-]*(?: [a-z][a-z-]*)?)(?:\s|$)`)

// commands lists the commands the top-level usage names, in its order.
func commands(top string) []string {
	var cmds []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(top))
	for sc.Scan() {
		m := commandLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		// "relay serve [flags]" names one word; "relay keys create" two.
		cmd := strings.TrimSuffix(m[1], " flags")
		if !seen[cmd] {
			seen[cmd] = true
			cmds = append(cmds, cmd)
		}
	}
	return cmds
}

// fixMachineDefaults replaces the machine's own numbers in the defaults of
// machineDefaults' flags.
func fixMachineDefaults(helpText string) string {
	lines := strings.Split(helpText, "\n")
	for i := 0; i+1 < len(lines); i++ {
		name, _, _ := strings.Cut(strings.TrimSpace(lines[i]), " ")
		how, ok := machineDefaults[strings.TrimPrefix(name, "-")]
		if !ok || !strings.HasPrefix(lines[i], "  -") {
			continue
		}
		lines[i+1] = defaultSuffix.ReplaceAllString(lines[i+1], "(default: "+how+")")
	}
	return strings.Join(lines, "\n")
}

var defaultSuffix = regexp.MustCompile(`\(default:? [^)]*\)$`)

// flagDoc is one flag as the flag package prints it.
type flagDoc struct {
	name, arg, usage, env, def string
}

var envSuffix = regexp.MustCompile(`\((RELAY_[A-Z0-9_]+)[^)]*\)`)

// parseFlags reads the flag package's PrintDefaults output: a line
// "  -name arg" followed by usage lines indented with a tab.
func parseFlags(helpText string) []flagDoc {
	var flags []flagDoc
	sc := bufio.NewScanner(strings.NewReader(helpText))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  -"):
			name, arg, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			flags = append(flags, flagDoc{name: name, arg: strings.TrimSpace(arg)})
		case strings.HasPrefix(line, "    \t") && len(flags) > 0:
			f := &flags[len(flags)-1]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
		}
	}
	for i := range flags {
		f := &flags[i]
		if m := defaultSuffix.FindStringIndex(f.usage); m != nil {
			f.def = strings.TrimSuffix(strings.TrimPrefix(f.usage[m[0]:m[1]], "(default"), ")")
			f.def = strings.TrimPrefix(strings.TrimSpace(f.def), ": ")
			f.usage = strings.TrimSpace(f.usage[:m[0]])
		}
		if m := envSuffix.FindStringSubmatch(f.usage); m != nil {
			f.env = m[1]
		}
	}
	return flags
}

// configPage renders the table of every flag of `relay serve`.
func configPage(serveHelp string) ([]byte, error) {
	flags := parseFlags(serveHelp)
	if len(flags) == 0 {
		return nil, fmt.Errorf("no flag found in relay serve -h")
	}
	var b bytes.Buffer
	b.WriteString(generatedNote)
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Every flag of `relay serve`, from the flags themselves. Each has the environment variable named in its row; a flag given on the command line wins over its variable. A default of — is the zero value (empty, 0 or false), whose meaning the row gives. [Configuration](../operations/configuration.md) explains how to choose them.\n\n")
	b.WriteString("| flag | variable | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		def := f.def
		if def == "" {
			def = "—"
		} else if _, computed := machineDefaults[f.name]; !computed {
			def = "`" + strings.Trim(def, `"`) + "`"
		}
		env := ""
		if f.env != "" {
			env = "`" + f.env + "`"
		}
		usage := strings.TrimSpace(strings.TrimSuffix(f.usage, "("+f.env+")"))
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.name, env, cell(def), cell(usage))
	}
	for _, f := range flags {
		if f.env == "" {
			return nil, fmt.Errorf("flag --%s names no RELAY_* variable in its usage", f.name)
		}
	}
	return b.Bytes(), nil
}
