/**
 * The status schema every managed resource of this provider writes (ProxmoxVM, ProxmoxImage,
 * ProxmoxTemplate): its own `atProvider` inside crossplane-runtime's ResourceStatus (conditions,
 * the generation last reconciled, the last reconcile request handled). A function, so that no
 * schema is built before a CRD needs it: the image and template APIs are loaded by commands that
 * never build the ProxmoxVM status (crd-status.ts builds its schemas when it loads).
 */
import Type, { type TSchema } from 'typebox';
import { usageSchemas } from './usage.ts';

export function managedStatusSchema<T extends TSchema>(atProvider: T) {
  return Type.Object(
    {
      atProvider: Type.Optional(atProvider),
      conditions: Type.Optional(usageSchemas().ConditionsSchema),
      observedGeneration: Type.Optional(
        Type.Integer({ format: 'int64', minimum: 0, description: 'The metadata.generation last reconciled.' }),
      ),
      lastHandledReconcileAt: Type.Optional(
        Type.String({ description: 'The last crossplane.io/reconcile-requested-at value handled.' }),
      ),
    },
    { description: 'The observed state, written by the provider.' },
  );
}
