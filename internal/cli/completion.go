package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// Shells completion knows.
var shells = []string{"bash", "zsh", "fish"}

// bashCompletion asks ibpath itself for the candidates
// (--generate-bash-completion), like urfave/cli's bash_autocomplete.
const bashCompletion = `# bash completion of ibpath; install with:
#   ibpath completion bash > /etc/bash_completion.d/ibpath
_ibpath_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _ibpath_complete ibpath
`

// zshCompletion does the same for zsh, like urfave/cli's zsh_autocomplete.
const zshCompletion = `#compdef ibpath
# zsh completion of ibpath; install with:
#   ibpath completion zsh > "${fpath[1]}/_ibpath"
_ibpath() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
if [[ "$(basename -- ${(%):-%x})" != "_ibpath" ]]; then
  compdef _ibpath ibpath
fi
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "SHELL",
		Description: "completion prints a script that completes ibpath's commands and flags. Install it with " +
			"`ibpath completion bash > /etc/bash_completion.d/ibpath`, " +
			"`ibpath completion zsh > \"${fpath[1]}/_ibpath\"` or " +
			"`ibpath completion fish > ~/.config/fish/completions/ibpath.fish`.",
		Action: func(c *cli.Context) error {
			args, err := positional(c, 1, 1, "bash|zsh|fish")
			if err != nil {
				return err
			}
			script, err := CompletionScript(args[0])
			if err != nil {
				return &usageError{err: fmt.Errorf("completion: %w", err)}
			}
			_, err = io.WriteString(c.App.Writer, script)
			return err
		},
	}
}

// CompletionScript returns the completion script of ibpath for shell.
func CompletionScript(shell string) (string, error) {
	switch shell {
	case "bash":
		return bashCompletion, nil
	case "zsh":
		return zshCompletion, nil
	case "fish":
		s, err := NewApp(io.Discard, io.Discard).ToFishCompletion()
		if err != nil {
			return "", fmt.Errorf("fish completion: %w", err)
		}
		return s, nil
	}
	return "", fmt.Errorf("unknown shell %q: want %s", shell, strings.Join(shells, ", "))
}
