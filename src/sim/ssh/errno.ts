/**
 * The errno a simulated file operation fails with, and how OpenSSH's sftp-server reports it:
 * errno_to_portable (openssh-portable sftp-server.c:212-245 at 0ef0f5a83) maps it to an SFTP
 * status, and the status message is the status's generic text (status_to_message, :522-537):
 * a full disk is `SSH_FX_FAILURE` "Failure", not the errno's text.
 */
export type Errno =
  | 'ENOENT'
  | 'ENOTDIR'
  | 'EBADF'
  | 'EACCES'
  | 'EINVAL'
  | 'EEXIST'
  | 'EISDIR'
  | 'ENOTEMPTY'
  | 'EXDEV'
  | 'ENOSPC'
  | 'EBUSY'
  | 'ENOSYS';

export class SftpErrno extends Error {
  readonly code: Errno;
  constructor(code: Errno) {
    super(code);
    this.code = code;
  }
}

/** SSH_FX_* (draft-ietf-secsh-filexfer-02). */
export const FX = {
  OK: 0,
  EOF: 1,
  NO_SUCH_FILE: 2,
  PERMISSION_DENIED: 3,
  FAILURE: 4,
  BAD_MESSAGE: 5,
  OP_UNSUPPORTED: 8,
} as const;

export const FX_MESSAGE: Record<number, string> = {
  0: 'Success',
  1: 'End of file',
  2: 'No such file',
  3: 'Permission denied',
  4: 'Failure',
  5: 'Bad message',
  6: 'No connection',
  7: 'Connection lost',
  8: 'Operation unsupported',
};

export function errnoToFx(code: Errno): number {
  switch (code) {
    case 'ENOENT':
    case 'ENOTDIR':
    case 'EBADF':
      return FX.NO_SUCH_FILE;
    case 'EACCES':
      return FX.PERMISSION_DENIED;
    case 'EINVAL':
      return FX.BAD_MESSAGE;
    case 'ENOSYS':
      return FX.OP_UNSUPPORTED;
    default:
      return FX.FAILURE;
  }
}
