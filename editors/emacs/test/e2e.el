;;; e2e.el --- headless Emacs + eglot against dspark-lsp -*- lexical-binding: t -*-
;;
;; Run as: emacs --batch -l e2e.el
;; Env: DSPARK_E2E_SNIPPET (a file holding the README's eglot snippet, evaluated as written),
;;      DSPARK_E2E_FILE (the Python file to open), DSPARK_E2E_LINE / DSPARK_E2E_TYPE (the line to go to,
;;      1-based, and what to type at its end), DSPARK_E2E_OUT (JSON result), DSPARK_E2E_TIMEOUT_S.
;;
;; It does what a user does: the snippet in the init, a Python buffer, M-x eglot, type, then
;; completion-at-point (eglot's capf sends textDocument/completion), and writes what the server
;; answered and what the buffer holds afterwards.

(require 'package)
;; Debian's elpa-* packages (elpa-eglot on Emacs 28) live in /usr/share/emacs/site-lisp/elpa and are
;; activated by package.el, which batch mode does not initialise by itself.
(package-initialize)
(require 'json)
(require 'python)

(defvar dspark-e2e-result nil "Alist written to DSPARK_E2E_OUT.")
(defvar dspark-e2e-request-errors nil "Requests that failed (timed out) before an item came.")
(defun dspark-e2e-put (key value) (push (cons key value) dspark-e2e-result))
(defun dspark-e2e-write-and-exit (code)
  (with-temp-file (getenv "DSPARK_E2E_OUT")
    (insert (json-encode dspark-e2e-result)))
  (kill-emacs code))

(condition-case err
    (progn
      (require 'eglot)
      (dspark-e2e-put 'eglot_version (if (fboundp 'eglot--version) (eglot--version)
                                       (or (ignore-errors (package-desc-version-string
                                                           (cadr (assq 'eglot package-alist))))
                                           "unknown")))
      (dspark-e2e-put 'emacs_version emacs-version)
      ;; The README's snippet, as written (with-eval-after-load runs at once: eglot is loaded).
      (load (getenv "DSPARK_E2E_SNIPPET") nil t)
      (dspark-e2e-put 'server_program
                      (format "%S" (cdr (assoc '(python-mode python-ts-mode) eglot-server-programs))))
      (find-file (getenv "DSPARK_E2E_FILE"))
      (python-mode)
      ;; What M-x eglot does in a buffer whose mode has an entry: guess the contact, then connect.
      (let ((eglot-sync-connect t)
            (eglot-connect-timeout 60))
        (apply #'eglot (eglot--guess-contact)))
      (dspark-e2e-put 'connected (and (eglot-current-server) t))
      (goto-char (point-min))
      (forward-line (1- (string-to-number (getenv "DSPARK_E2E_LINE"))))
      (end-of-line)
      (insert (getenv "DSPARK_E2E_TYPE"))
      (let* ((deadline (+ (float-time) (string-to-number (or (getenv "DSPARK_E2E_TIMEOUT_S") "180"))))
             (candidates nil)
             (tries 0))
        ;; The models load in the background; until they are ready the server answers an empty
        ;; list, so ask again (as a user pressing M-TAB again would) until an item comes.
        (while (and (null candidates) (< (float-time) deadline))
          (setq tries (1+ tries))
          (let ((capf (eglot-completion-at-point)))
            (when capf
              ;; eglot's request times out after jsonrpc-default-request-timeout (10 s); the first
              ;; decode on a loaded CI machine can take longer, so a timeout is one more try.
              (condition-case e
                  (setq candidates (all-completions
                                    (buffer-substring-no-properties (nth 0 capf) (nth 1 capf))
                                    (nth 2 capf)))
                (jsonrpc-error (push (format "%S" e) dspark-e2e-request-errors)))))
          (unless candidates (sleep-for 1)))
        (dspark-e2e-put 'tries tries)
        (dspark-e2e-put 'request_errors (vconcat (reverse dspark-e2e-request-errors)))
        (dspark-e2e-put 'candidates (vconcat (mapcar #'substring-no-properties candidates)))
        (when candidates
          ;; Accept it: completion-at-point with one candidate inserts it (eglot applies the item's
          ;; textEdit in its :exit-function).
          (let ((completion-auto-help nil))
            (completion-at-point))))
      (dspark-e2e-put 'line (buffer-substring-no-properties (line-beginning-position) (line-end-position)))
      (dspark-e2e-put 'buffer (buffer-substring-no-properties (point-min) (point-max)))
      (ignore-errors (eglot-shutdown (eglot-current-server)))
      (dspark-e2e-write-and-exit 0))
  (error
   (dspark-e2e-put 'error (format "%S" err))
   (dspark-e2e-write-and-exit 1)))
